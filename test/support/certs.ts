import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export interface Certs {
  dir: string;
  file(name: string): string;
  // Issues (or re-issues) <name>.crt/.key signed by the test CA, valid for 127.0.0.1.
  issue(name: string): void;
}

// A throwaway CA and certificates for 127.0.0.1, made with the openssl command line.
export function makeCerts(): Certs {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-certs-'));
  const file = (n: string) => path.join(dir, n);
  const ssl = (...args: string[]) => execFileSync('openssl', args, { stdio: 'pipe' });
  ssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=sluice-test-ca', '-keyout', file('ca.key'), '-out', file('ca.crt'));
  fs.writeFileSync(file('san.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
  const issue = (name: string) => {
    ssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=127.0.0.1', '-keyout', file(`${name}.key.new`), '-out', file(`${name}.csr`));
    ssl(
      'x509',
      '-req',
      '-in',
      file(`${name}.csr`),
      '-CA',
      file('ca.crt'),
      '-CAkey',
      file('ca.key'),
      '-CAcreateserial',
      '-days',
      '1',
      '-extfile',
      file('san.ext'),
      '-out',
      file(`${name}.crt.new`),
    );
    // Replace both files by rename, as a certificate manager would.
    fs.renameSync(file(`${name}.key.new`), file(`${name}.key`));
    fs.renameSync(file(`${name}.crt.new`), file(`${name}.crt`));
  };
  return { dir, file, issue };
}
