import { ConfigError } from '../errors';
import type { Logger } from '../logger';
import type { ConfigLimits } from './limits';
import { loadConfig, type LoadResult, warningMessage } from './load';
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
// or SIGHUP / an explicit call.
export type ReloadTrigger = 'startup' | 'watch' | 'poll' | 'signal';

// The running config. A new one is validated in full and swapped in one assignment; an invalid one
// is reported (and remembered until a good one loads) and the last good config keeps serving.
export class ConfigHolder {
  private current?: CompiledConfig;
  private loadedAt?: Date;
  private rejected?: Rejection;
  private attempts = 0;

  constructor(
    private readonly paths: readonly string[],
    private readonly options: {
      mergeDomains: boolean;
      logger: Logger;
      onLoad?: (ok: boolean) => void;
      limits?: ConfigLimits;
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

  // Never throws: whatever goes wrong while loading rejects the new config, never the process.
  reload(trigger?: ReloadTrigger): ReloadResult {
    const { logger, onLoad } = this.options;
    const why = trigger ?? (this.attempts === 0 ? 'startup' : 'signal');
    this.attempts++;
    logger.info({ event: 'config_reload', trigger: why, paths: this.paths }, `loading config (${why})`);
    const { config, errors, warnings } = this.load();
    for (const w of warnings) logger.warn({ event: 'config_warning', file: w.file, line: w.line, warning: w.detail }, warningMessage(w));
    if (config === undefined) {
      for (const e of errors) logger.error({ event: 'config_error', file: e.file, line: e.line, error: e.message }, e.message);
      const kept = this.current !== undefined;
      const outcome = kept
        ? `keeping the config loaded at ${this.loadedAt?.toISOString()}`
        : 'no config is loaded: requests are answered UNAVAILABLE until a valid one is';
      logger.error(
        { event: 'config_rejected', trigger: why, paths: this.paths, errors: errors.length, keptPrevious: kept },
        `config rejected (${errors.length} error(s)); ${outcome}`,
      );
      this.rejected = { since: this.rejected?.since ?? new Date(), errors };
      onLoad?.(false);
      return { ok: false, errors, warnings };
    }
    this.current = config;
    this.loadedAt = new Date();
    this.rejected = undefined;
    logger.info(
      { event: 'config_loaded', trigger: why, paths: this.paths, files: config.files, domains: [...config.domains.keys()], warnings: warnings.length },
      'config loaded',
    );
    onLoad?.(true);
    return { ok: true, errors: [], warnings };
  }

  private load(): LoadResult {
    try {
      return loadConfig([...this.paths], { mergeDomains: this.options.mergeDomains, limits: this.options.limits });
    } catch (e) {
      const where = this.paths.join(', ');
      return { errors: [new ConfigError(where, `error loading config: ${(e as Error)?.message ?? String(e)}`)], warnings: [] };
    }
  }
}
