import type { Logger } from '../logger';

// SIGTERM / SIGINT stop gracefully, once; `hup` runs on SIGHUP (without a handler SIGHUP would end
// the process). Exit 0 after a clean stop, 1 when the stop failed.
export function stopOnSignals(o: { logger: Logger; stop: () => Promise<void>; hup: () => void }): { stop: (why: string) => void } {
  let stopping = false;
  const stop = (why: string) => {
    if (stopping) return;
    stopping = true;
    o.logger.info({ event: 'signal', signal: why }, 'shutting down');
    o.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        o.logger.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGHUP', o.hup);
  return { stop };
}
