import { execFileSync } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import path from 'node:path';

// A tool installed with `go install` (grpcurl, h2spec): on PATH, or where `go install` puts it
// (GOBIN, else GOPATH's first entry's bin), which a fresh CI shell does not have on PATH.
export function findGoTool(name: string): string | undefined {
  const dirs = (process.env.PATH ?? '').split(path.delimiter).filter(Boolean);
  for (const variable of ['GOBIN', 'GOPATH']) {
    try {
      const value = execFileSync('go', ['env', variable], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
      if (value) dirs.push(variable === 'GOBIN' ? value : path.join(value.split(path.delimiter)[0], 'bin'));
    } catch {
      // no Go toolchain: PATH only
    }
  }
  return dirs
    .map((dir) => path.join(dir, name))
    .find((file) => {
      try {
        accessSync(file, constants.X_OK);
        return true;
      } catch {
        return false;
      }
    });
}
