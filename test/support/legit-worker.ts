import { parentPort, workerData } from 'node:worker_threads';
import { LegitLoop, type LegitOptions } from './legit-client';

// The worker thread of legit-client.ts' LegitClient: a message once the first call is done, the
// stats in answer to 'stop'.
const loop = new LegitLoop(workerData as LegitOptions);
void loop.ready.then(() => parentPort!.postMessage('ready'));
parentPort!.once('message', async () => {
  parentPort!.postMessage(await loop.stop());
  parentPort!.close();
});
