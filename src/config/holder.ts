import { ConfigError } from '../errors';
import type { Logger } from '../logger';
import type { ConfigLimits } from './limits';
import { loadConfig, type LoadResult } from './load';
import type { CompiledConfig } from './types';

export interface ReloadResult {
  ok: boolean;
  errors: ConfigError[];
}

// What asked for a load: the first one at start, the file watch, the periodic fingerprint check,
// or SIGHUP / an explicit call.
export type ReloadTrigger = 'startup' | 'watch' | 'poll' | 'signal';

// The running config. A new one is validated in full and swapped in one assignment; an invalid one
// is reported and the last good config keeps serving.
export class ConfigHolder {
  private current?: CompiledConfig;
  private loadedAt?: Date;
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

  // Never throws: whatever goes wrong while loading rejects the new config, never the process.
  reload(trigger?: ReloadTrigger): ReloadResult {
    const { logger, onLoad } = this.options;
    const why = trigger ?? (this.attempts === 0 ? 'startup' : 'signal');
    this.attempts++;
    logger.info({ event: 'config_reload', trigger: why, paths: this.paths }, `loading config (${why})`);
    const { config, errors } = this.load();
    if (config === undefined) {
      for (const e of errors) logger.error({ event: 'config_error', file: e.file, line: e.line, error: e.message }, e.message);
      logger.error(
        { event: 'config_rejected', trigger: why, paths: this.paths, errors: errors.length, keptPrevious: this.current !== undefined },
        'config rejected; keeping the last good config',
      );
      onLoad?.(false);
      return { ok: false, errors };
    }
    this.current = config;
    this.loadedAt = new Date();
    logger.info(
      { event: 'config_loaded', trigger: why, paths: this.paths, files: config.files, domains: [...config.domains.keys()] },
      'config loaded',
    );
    onLoad?.(true);
    return { ok: true, errors: [] };
  }

  private load(): LoadResult {
    try {
      return loadConfig([...this.paths], { mergeDomains: this.options.mergeDomains, limits: this.options.limits });
    } catch (e) {
      const where = this.paths.join(', ');
      return { errors: [new ConfigError(where, `error loading config: ${(e as Error)?.message ?? String(e)}`)] };
    }
  }
}
