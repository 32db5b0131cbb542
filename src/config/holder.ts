import type { ConfigError } from '../errors';
import type { Logger } from '../logger';
import { loadConfig } from './load';
import type { CompiledConfig } from './types';

export interface ReloadResult {
  ok: boolean;
  errors: ConfigError[];
}

// The running config. A new one is validated in full and swapped in one assignment; an invalid one
// is reported and the last good config keeps serving.
export class ConfigHolder {
  private current?: CompiledConfig;
  private loadedAt?: Date;

  constructor(
    private readonly paths: readonly string[],
    private readonly options: { mergeDomains: boolean; logger: Logger; onLoad?: (ok: boolean) => void },
  ) {}

  get config(): CompiledConfig | undefined {
    return this.current;
  }

  get lastLoad(): Date | undefined {
    return this.loadedAt;
  }

  reload(): ReloadResult {
    const { logger, onLoad } = this.options;
    const { config, errors } = loadConfig([...this.paths], { mergeDomains: this.options.mergeDomains });
    if (config === undefined) {
      for (const e of errors) logger.error({ event: 'config_error', file: e.file, line: e.line, error: e.message }, e.message);
      logger.error(
        { event: 'config_rejected', paths: this.paths, errors: errors.length, keptPrevious: this.current !== undefined },
        'config rejected; keeping the last good config',
      );
      onLoad?.(false);
      return { ok: false, errors };
    }
    this.current = config;
    this.loadedAt = new Date();
    logger.info(
      { event: 'config_loaded', paths: this.paths, files: config.files, domains: [...config.domains.keys()] },
      'config loaded',
    );
    onLoad?.(true);
    return { ok: true, errors: [] };
  }
}
