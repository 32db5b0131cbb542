import * as grpc from '@grpc/grpc-js';
import { RateLimitResponse, RateLimitResponse_Code, RateLimitServiceService } from '../src/gen/envoy/service/ratelimit/v3/rls';
import { GRPC_SERVER_OPTIONS } from '../src/server/grpc';

// The baseline of `npm run bench`: grpc-js serving ShouldRateLimit with the same generated codec
// and server options as sluice and a fixed answer (OK, one status per descriptor), nothing else. What sluice adds on
// top of this is the cost of deciding. Prints the bound port on stdout.
const answer: RateLimitResponse = {
  overallCode: RateLimitResponse_Code.OK,
  statuses: [],
  responseHeadersToAdd: [],
  requestHeadersToAdd: [],
  rawBody: Buffer.alloc(0),
};

const server = new grpc.Server(GRPC_SERVER_OPTIONS);
server.addService(RateLimitServiceService, {
  shouldRateLimit(call: grpc.ServerUnaryCall<any, any>, callback: grpc.sendUnaryData<RateLimitResponse>) {
    const statuses = call.request.descriptors.map(() => ({ code: RateLimitResponse_Code.OK, limitRemaining: 0, responseHeadersToAdd: [] }));
    callback(null, { ...answer, statuses });
  },
});
server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, port) => {
  if (err) throw err;
  console.log(String(port));
});
process.on('SIGTERM', () => server.forceShutdown());
