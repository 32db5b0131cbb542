import { ConfigError } from '../errors';
import type { Logger } from '../logger';
import type { ConfigLimits } from './limits';
import { compileDocuments, loadConfig, type LoadResult, warningMessage } from './load';
import type { RawConfigFile } from './parse';
import type { CompiledConfig } from './types';

export interface ReloadResult {
  ok: boolean;
  errors: ConfigError[];
  warnings: ConfigError[];
}

// The loads rejected since the last good one: when the first was, and the latest one's errors.
export interface Rejection {
  since: Date;
  errors: ConfigError[];
}

// What asked for a load: the first one at start, the file watch, the periodic fingerprint check,
// SIGHUP / an explicit call, or a push from the xDS control plane.
export type ReloadTrigger = 'startup' | 'watch' | 'poll' | 'signal' | 'xds';

// The running config. A new one is validated in full and swapped in one assignment; an invalid one
// is reported (and remembered until a good one loads) and the last good config keeps serving.
export class ConfigHolder {
  private current?: CompiledConfig;
  private loadedAt?: Date;
  private rejected?: Rejection;
  private attempts = 0;
  // Set while the config served is the empty stand-in of FORCE_START_WITHOUT_INITIAL_CONFIG.
  private standIn = false;

  constructor(
    private readonly paths: readonly string[],
    private readonly options: {
      mergeDomains: boolean;
      logger: Logger;
      onLoad?: (ok: boolean, trigger: ReloadTrigger) => void;
      limits?: ConfigLimits;
      // Where the config comes from, for log lines, when not from `paths` (e.g. 'xds localhost:18000').
      source?: string;
    },
  ) {}

  get config(): CompiledConfig | undefined {
    return this.current;
  }

  get lastLoad(): Date | undefined {
    return this.loadedAt;
  }

  // Set while the latest load was rejected (cleared by the next good one).
  get rejection(): Rejection | undefined {
    return this.rejected;
  }

  // True while no config has loaded and the empty stand-in answers (see serveEmptyUntilLoaded).
  get waitingForFirst(): boolean {
    return this.standIn;
  }

  // FORCE_START_WITHOUT_INITIAL_CONFIG: until the first config loads, serve one with no domain, so
  // every request is answered as upstream answers an unknown domain (OK, no limit). Not a load:
  // no metric, no onLoad.
  serveEmptyUntilLoaded(): void {
    if (this.current !== undefined) return;
    this.current = { domains: new Map(), files: [] };
    this.standIn = true;
  }

  // Never throws: whatever goes wrong while loading rejects the new config, never the process.
  reload(trigger?: ReloadTrigger): ReloadResult {
    const why = trigger ?? (this.attempts === 0 ? 'startup' : 'signal');
    return this.apply(why, () => this.load());
  }

  // Documents that did not come from files (an xDS push), through the same compiler; the same
  // verdict, metrics and logs as a file reload.
  // `errors`: problems found before compiling (undecodable resources), which reject the push.
  applyDocuments(documents: RawConfigFile[], o: { errors?: ConfigError[]; trigger?: ReloadTrigger } = {}): ReloadResult {
    return this.apply(o.trigger ?? 'xds', () => {
      if (o.errors !== undefined && o.errors.length > 0) return { errors: o.errors, warnings: [] };
      try {
        return compileDocuments(documents, { mergeDomains: this.options.mergeDomains });
      } catch (e) {
        return { errors: [new ConfigError(this.where(), `error compiling config: ${(e as Error)?.message ?? String(e)}`)], warnings: [] };
      }
    });
  }

  // A config the primary of WORKERS > 1 loaded and compiled (server/workers.ts): swapped in as a
  // load of this process, with the primary's trigger.
  adopt(config: CompiledConfig, trigger: ReloadTrigger): ReloadResult {
    return this.apply(trigger, () => ({ config, errors: [], warnings: [] }));
  }

  private where(): string {
    return this.options.source ?? this.paths.join(', ');
  }

  private apply(why: ReloadTrigger, load: () => LoadResult): ReloadResult {
    const { logger, onLoad } = this.options;
    this.attempts++;
    const from = this.options.source === undefined ? { paths: this.paths } : { source: this.options.source };
    logger.info({ event: 'config_reload', trigger: why, ...from }, `loading config (${why})`);
    const { config, errors, warnings } = load();
    for (const w of warnings) logger.warn({ event: 'config_warning', file: w.file, line: w.line, warning: w.detail }, warningMessage(w));
    if (config === undefined) {
      for (const e of errors) logger.error({ event: 'config_error', file: e.file, line: e.line, error: e.message }, e.message);
      const kept = this.current !== undefined && !this.standIn;
      const outcome = kept
        ? `keeping the config loaded at ${this.loadedAt?.toISOString()}`
        : this.standIn
          ? 'no config is loaded: every domain is unknown (FORCE_START_WITHOUT_INITIAL_CONFIG) until a valid one is'
          : 'no config is loaded: requests are answered UNAVAILABLE until a valid one is';
      logger.error(
        { event: 'config_rejected', trigger: why, ...from, errors: errors.length, keptPrevious: kept },
        `config rejected (${errors.length} error(s)); ${outcome}`,
      );
      this.rejected = { since: this.rejected?.since ?? new Date(), errors };
      onLoad?.(false, why);
      return { ok: false, errors, warnings };
    }
    this.current = config;
    this.standIn = false;
    this.loadedAt = new Date();
    this.rejected = undefined;
    logger.info(
      { event: 'config_loaded', trigger: why, ...from, files: config.files, domains: [...config.domains.keys()], warnings: warnings.length },
      'config loaded',
    );
    onLoad?.(true, why);
    return { ok: true, errors: [], warnings };
  }

  private load(): LoadResult {
    try {
      return loadConfig([...this.paths], { mergeDomains: this.options.mergeDomains, limits: this.options.limits });
    } catch (e) {
      const where = this.where();
      return { errors: [new ConfigError(where, `error loading config: ${(e as Error)?.message ?? String(e)}`)], warnings: [] };
    }
  }
}
