import fs from 'node:fs';
import path from 'node:path';

// sluice's version, from the package.json installed beside the compiled code: two levels above
// dist/src/ in a checkout, in the image (/app) and in an npm install alike. Read at run time so a
// release needs no rebuild step to stamp it.
function readVersion(): string {
  try {
    const pkg = JSON.parse(fs.readFileSync(path.resolve(__dirname, '../../package.json'), 'utf8')) as { name?: string; version?: string };
    if (pkg.name === 'sluice' && typeof pkg.version === 'string') return pkg.version;
  } catch {
    // fall through: a copied dist/ without its package.json
  }
  return 'unknown';
}

export const VERSION = readVersion();

// The build as reported in the start-up log, /settings and sluice_build_info.
export function buildInfo(): { version: string; node: string } {
  return { version: VERSION, node: process.versions.node };
}
