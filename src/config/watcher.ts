import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { Logger } from '../logger';
import { listConfigFiles } from './load';

// Watches the config paths and calls `reload` when what they hold changes. Directories are
// watched recursively, a file through its parent directory (editors and `kubectl cp` replace files
// by renaming). A Kubernetes ConfigMap update swaps the `..data` symlink to a new hidden directory
// in one rename: that rename is an event on the watched directory, and the content fingerprint
// (which follows symlinks) changes, so it reloads; upstream misses it because it watches the
// files' own inodes. Events are debounced, and a reload happens only when the fingerprint changed.
export class ConfigWatcher {
  private readonly watchers: fs.FSWatcher[] = [];
  private timer?: NodeJS.Timeout;
  private fingerprint: string;

  constructor(
    private readonly paths: readonly string[],
    private readonly reload: () => void,
    private readonly logger: Logger,
    private readonly debounceMs = 100,
  ) {
    this.fingerprint = this.compute();
  }

  start(): void {
    for (const p of this.paths) {
      let target = p;
      let recursive = true;
      try {
        if (!fs.statSync(p).isDirectory()) {
          target = path.dirname(p);
          recursive = false;
        }
        const w = fs.watch(target, { recursive, persistent: false }, () => this.changed());
        w.on('error', (err) => this.logger.warn({ event: 'config_watch_error', path: target, error: err.message }, 'config watch failed'));
        this.watchers.push(w);
      } catch (err) {
        this.logger.warn({ event: 'config_watch_error', path: p, error: (err as Error).message }, 'cannot watch config path');
      }
    }
    this.logger.info({ event: 'config_watch', paths: this.paths }, 'watching config for changes');
  }

  stop(): void {
    clearTimeout(this.timer);
    for (const w of this.watchers.splice(0)) w.close();
  }

  private changed(): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      const next = this.compute();
      if (next === this.fingerprint) return;
      this.fingerprint = next;
      this.logger.info({ event: 'config_changed', paths: this.paths }, 'config changed on disk: reloading');
      this.reload();
    }, this.debounceMs);
    this.timer.unref();
  }

  // The listed files and their contents, read through symlinks.
  private compute(): string {
    const hash = createHash('sha256');
    const { files, errors } = listConfigFiles([...this.paths]);
    for (const e of errors) hash.update(`error:${e.message}\n`);
    for (const f of files) {
      hash.update(`file:${f}\n`);
      try {
        hash.update(fs.readFileSync(f));
      } catch (err) {
        hash.update(`unreadable:${(err as Error).message}`);
      }
    }
    return hash.digest('hex');
  }
}
