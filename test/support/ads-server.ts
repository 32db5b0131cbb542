import * as grpc from '@grpc/grpc-js';
import { AggregatedDiscoveryServiceService, type DiscoveryRequest, type DiscoveryResponse } from '../../src/gen/envoy/service/discovery/v3/discovery';
import { type DeepPartial, RateLimitConfig } from '../../src/gen/ratelimit/config/ratelimit/v3/rls_conf';
import { RATE_LIMIT_CONFIG_TYPE } from '../../src/config/xds/convert';

// A control plane written for the tests: an ADS (state-of-the-world) server of RateLimitConfig
// resources, behaving as go-control-plane's snapshot cache does for what sluice uses: a new stream
// gets the snapshot unless it already has that version; a push goes to every open stream.

export interface ReceivedRequest extends DiscoveryRequest {
  // gRPC metadata of the stream it came on.
  metadata: Record<string, string>;
}

export interface ControlPlane {
  port: number;
  requests: ReceivedRequest[];
  // Sets the snapshot and sends it to every open stream; resolves with the nonce sent.
  push(version: string, configs: DeepPartial<RateLimitConfig>[]): string;
  // Resolves with the first request (already received or to come) matching the predicate.
  waitForRequest(predicate: (r: ReceivedRequest) => boolean): Promise<ReceivedRequest>;
  stop(): Promise<void>;
}

type Stream = grpc.ServerDuplexStream<DiscoveryRequest, DiscoveryResponse>;

export function rlsConfigAny(config: DeepPartial<RateLimitConfig>): DiscoveryResponse['resources'][number] {
  const full = RateLimitConfig.fromPartial(config);
  return { typeUrl: RATE_LIMIT_CONFIG_TYPE, value: Buffer.from(RateLimitConfig.encode(full).finish()) };
}

export async function startControlPlane(o: { port?: number; credentials?: grpc.ServerCredentials } = {}): Promise<ControlPlane> {
  const server = new grpc.Server();
  const streams = new Set<Stream>();
  const requests: ReceivedRequest[] = [];
  const waiters: { predicate: (r: ReceivedRequest) => boolean; resolve: (r: ReceivedRequest) => void }[] = [];
  let snapshot: { version: string; resources: DiscoveryResponse['resources'] } | undefined;
  let nonce = 0;

  const send = (stream: Stream): string => {
    const n = String(++nonce);
    stream.write({ versionInfo: snapshot!.version, resources: snapshot!.resources, canary: false, typeUrl: RATE_LIMIT_CONFIG_TYPE, nonce: n });
    return n;
  };
  const record = (request: DiscoveryRequest, stream: Stream) => {
    const metadata: Record<string, string> = {};
    for (const [k, v] of Object.entries(stream.metadata.getMap())) metadata[k] = String(v);
    const received = { ...request, metadata };
    requests.push(received);
    for (const w of [...waiters]) if (w.predicate(received)) waiters.splice(waiters.indexOf(w), 1), w.resolve(received);
  };

  server.addService(AggregatedDiscoveryServiceService, {
    streamAggregatedResources(stream: Stream) {
      streams.add(stream);
      let first = true;
      stream.on('data', (request: DiscoveryRequest) => {
        record(request, stream);
        // Only a stream's first request asks for the snapshot; later ones are ACKs and NACKs.
        if (first && snapshot !== undefined && request.versionInfo !== snapshot.version) send(stream);
        first = false;
      });
      const done = () => streams.delete(stream);
      stream.on('end', () => (done(), stream.end()));
      stream.on('error', done);
      stream.on('cancelled', done);
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(`127.0.0.1:${o.port ?? 0}`, o.credentials ?? grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return {
    port,
    requests,
    push(version, configs) {
      snapshot = { version, resources: configs.map((c) => rlsConfigAny(c)) };
      let last = '';
      for (const s of streams) last = send(s);
      return last;
    },
    waitForRequest(predicate) {
      const seen = requests.find(predicate);
      if (seen !== undefined) return Promise.resolve(seen);
      return new Promise((resolve) => waiters.push({ predicate, resolve }));
    },
    async stop() {
      for (const s of streams) s.destroy();
      server.forceShutdown();
    },
  };
}
