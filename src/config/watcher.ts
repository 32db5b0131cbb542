import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { Logger } from '../logger';
import { DEFAULT_CONFIG_LIMITS } from './limits';
import { listConfigFiles } from './load';

export interface ConfigWatcherOptions {
  paths: readonly string[];
  // Called when what the paths hold changed since the last call.
  reload: (trigger: 'watch' | 'poll') => void;
  logger: Logger;
  // Period of the fingerprint check that catches whatever the file watch missed; 0 = off.
  pollIntervalMs?: number;
  debounceMs?: number;
  // Files larger than this are fingerprinted by size and time instead of read (the loader refuses them).
  maxFileBytes?: number;
}

// Most directories watched at once, so a config path pointing at a huge tree cannot exhaust
// inotify watches; the periodic check still covers the rest.
const MAX_WATCHED_DIRS = 1000;

interface Watched {
  watcher: fs.FSWatcher;
  dev: number;
  ino: number;
}

// Watches the config paths and calls `reload` when what they hold changes.
//
// Every directory involved is watched on its own, never recursively (Node 20's recursive watch on
// Linux stops reporting after a rename-style save): each config directory and its subdirectories,
// the parent of each config path (so a file replaced by rename, or a directory deleted and
// recreated, is seen), and the directory each loaded file really lives in (a Kubernetes ConfigMap's
// `..2024_…` directory behind `..data`). After every event the watched set is rebuilt, re-watching a
// directory whose inode changed. An event only leads to a reload when the content fingerprint (file
// list and contents, read through symlinks) changed. Because events can still be lost (a watch
// limit, a network file system), the fingerprint is also compared every `pollIntervalMs`.
export class ConfigWatcher {
  private readonly watched = new Map<string, Watched>();
  private readonly paths: readonly string[];
  private readonly debounceMs: number;
  private readonly pollIntervalMs: number;
  private readonly maxFileBytes: number;
  private timer?: NodeJS.Timeout;
  private poller?: NodeJS.Timeout;
  private fingerprint: string;
  private stopped = false;

  constructor(private readonly options: ConfigWatcherOptions) {
    this.paths = options.paths.map((p) => path.resolve(p));
    this.debounceMs = options.debounceMs ?? 100;
    this.pollIntervalMs = options.pollIntervalMs ?? 5000;
    this.maxFileBytes = options.maxFileBytes ?? DEFAULT_CONFIG_LIMITS.maxFileBytes;
    this.fingerprint = this.compute();
  }

  start(): void {
    this.stopped = false;
    this.sync();
    if (this.pollIntervalMs > 0) {
      this.poller = setInterval(() => this.check('poll'), this.pollIntervalMs);
      this.poller.unref();
    }
    this.options.logger.info(
      { event: 'config_watch', paths: this.paths, directories: [...this.watched.keys()], pollIntervalMs: this.pollIntervalMs },
      'watching config for changes',
    );
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    clearInterval(this.poller);
    for (const w of this.watched.values()) w.watcher.close();
    this.watched.clear();
  }

  private changed(): void {
    if (this.stopped) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.check('watch'), this.debounceMs);
    this.timer.unref();
  }

  // Never throws: it runs from timers, where an exception would end the process.
  private check(trigger: 'watch' | 'poll'): void {
    if (this.stopped) return;
    try {
      this.sync();
      const next = this.compute();
      if (next === this.fingerprint) return;
      this.fingerprint = next;
      this.options.reload(trigger);
    } catch (err) {
      this.options.logger.warn({ event: 'config_watch_error', trigger, error: (err as Error)?.message ?? String(err) }, 'config check failed');
    }
  }

  // Brings the watched directories in line with what is on disk now.
  private sync(): void {
    const wanted = this.directories();
    for (const [dir, w] of this.watched) {
      const st = statOrUndefined(dir);
      if (!wanted.has(dir) || st === undefined || st.ino !== w.ino || st.dev !== w.dev) {
        w.watcher.close();
        this.watched.delete(dir);
      }
    }
    for (const dir of wanted) {
      if (this.watched.has(dir)) continue;
      const st = statOrUndefined(dir);
      if (st === undefined || !st.isDirectory()) continue;
      try {
        const watcher = fs.watch(dir, { persistent: false }, () => this.changed());
        watcher.on('error', (err) => {
          // Typically the directory was removed; the next sync re-watches whatever replaced it.
          this.options.logger.debug({ event: 'config_watch_error', path: dir, error: err.message }, 'config watch ended');
          watcher.close();
          if (this.watched.get(dir)?.watcher === watcher) this.watched.delete(dir);
          this.changed();
        });
        this.watched.set(dir, { watcher, dev: st.dev, ino: st.ino });
      } catch (err) {
        this.options.logger.warn({ event: 'config_watch_error', path: dir, error: (err as Error).message }, 'cannot watch config directory');
      }
    }
  }

  // Real paths of every directory to watch (see the class comment).
  private directories(): Set<string> {
    const out = new Set<string>();
    const add = (dir: string) => {
      if (out.size >= MAX_WATCHED_DIRS) return;
      const real = realOrUndefined(dir);
      if (real !== undefined) out.add(real);
    };
    for (const p of this.paths) {
      add(path.dirname(p));
      if (statOrUndefined(p)?.isDirectory()) this.addTree(p, out);
    }
    for (const f of listConfigFiles([...this.paths]).files) {
      const real = realOrUndefined(f);
      if (real !== undefined) add(path.dirname(real));
    }
    return out;
  }

  // The directory and every directory below it that the loader would walk (names starting with '.'
  // skipped, symlinks followed once), iteratively.
  private addTree(root: string, out: Set<string>): void {
    const seen = new Set<string>();
    const stack = [root];
    while (stack.length > 0 && out.size < MAX_WATCHED_DIRS) {
      const dir = stack.pop()!;
      const real = realOrUndefined(dir);
      if (real === undefined || seen.has(real)) continue;
      seen.add(real);
      out.add(real);
      let names: string[];
      try {
        names = fs.readdirSync(dir);
      } catch {
        continue;
      }
      for (const name of names) {
        if (name.startsWith('.')) continue;
        const full = path.join(dir, name);
        if (statOrUndefined(full)?.isDirectory()) stack.push(full);
      }
    }
  }

  // The listed files and their contents, read through symlinks.
  private compute(): string {
    const hash = createHash('sha256');
    const { files, errors } = listConfigFiles([...this.paths]);
    for (const e of errors) hash.update(`error:${e.message}\n`);
    for (const f of files) {
      hash.update(`file:${f}\n`);
      try {
        const st = fs.statSync(f);
        if (st.size > this.maxFileBytes) hash.update(`large:${st.size}:${st.mtimeMs}:${st.ino}`);
        else hash.update(fs.readFileSync(f));
      } catch (err) {
        hash.update(`unreadable:${(err as Error).message}`);
      }
    }
    return hash.digest('hex');
  }
}

function statOrUndefined(p: string): fs.Stats | undefined {
  try {
    return fs.statSync(p);
  } catch {
    return undefined;
  }
}

function realOrUndefined(p: string): string | undefined {
  try {
    return fs.realpathSync(p);
  } catch {
    return undefined;
  }
}
