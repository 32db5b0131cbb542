import * as grpc from '@grpc/grpc-js';
import { type RateLimitResponse, RateLimitResponse_Code, RateLimitServiceService } from '../src/gen/envoy/service/ratelimit/v3/rls';
import { GRPC_SERVER_OPTIONS } from '../src/server/grpc';
import { H2GrpcServer } from '../src/server/h2grpc/server';

// A baseline of `npm run bench`: ShouldRateLimit served with the same generated codec and server
// options as sluice and a fixed answer (OK, one status per descriptor), nothing else. What sluice
// adds on top of this is the cost of deciding. On grpc-js by default; with the argument `h2grpc`
// on sluice's own gRPC server (src/server/h2grpc, sluice's default), the floor of any sluice row.
// Prints the bound port on stdout.
const answer: RateLimitResponse = {
  overallCode: RateLimitResponse_Code.OK,
  statuses: [],
  responseHeadersToAdd: [],
  requestHeadersToAdd: [],
  rawBody: Buffer.alloc(0),
};

const impl = {
  shouldRateLimit(call: grpc.ServerUnaryCall<any, any>, callback: grpc.sendUnaryData<RateLimitResponse>) {
    const statuses = call.request.descriptors.map(() => ({ code: RateLimitResponse_Code.OK, limitRemaining: 0, responseHeadersToAdd: [] }));
    callback(null, { ...answer, statuses });
  },
};

if (process.argv[2] === 'h2grpc') {
  const server = new H2GrpcServer(GRPC_SERVER_OPTIONS, { calls: 0 });
  server.addService(RateLimitServiceService, impl);
  void server.bind('127.0.0.1', 0).then((port) => console.log(String(port)));
  process.on('SIGTERM', () => process.exit(0));
} else {
  const server = new grpc.Server(GRPC_SERVER_OPTIONS);
  server.addService(RateLimitServiceService, impl);
  server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, port) => {
    if (err) throw err;
    console.log(String(port));
  });
  process.on('SIGTERM', () => server.forceShutdown());
}
