import { parentPort, workerData } from 'node:worker_threads';
import { LegitLoop, type LegitOptions } from './legit-client';

// The worker thread of legit-client.ts' LegitClient: a message once the first call is done, the
// stats in answer to 'stop'. `node --test dist/test/` also runs every file under test/ on its own,
// where there is no parent to serve: then it does nothing.
const port = parentPort;
if (port !== null) {
  const loop = new LegitLoop(workerData as LegitOptions);
  void loop.ready.then(() => port.postMessage('ready'));
  port.once('message', async () => {
    port.postMessage(await loop.stop());
    port.close();
  });
}
