import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { create, createFileRegistry, fromBinary, fromJson, toBinary, toJson } from '@bufbuild/protobuf';
import { type FileDescriptorProto, FileDescriptorProtoSchema, FileDescriptorSetSchema } from '@bufbuild/protobuf/wkt';
import { ManualClock } from '../../../src/clock';
import * as v1 from '../../../src/gen/grpc/reflection/v1/reflection';
import * as v1alpha from '../../../src/gen/grpc/reflection/v1alpha/reflection';
import { type Running, startApp } from '../../support/app';

// What grpcurl (protobuf-go) does with server reflection, done with protobuf-es, which is as strict:
// every type reference and import of a served descriptor must resolve, or the registry throws.

const EXAMPLE = path.resolve(__dirname, '../../../../examples/config');
const T0 = 1_800_000_000_000; // a multiple of 5 minutes: every window starts here
const RLS = 'envoy.service.ratelimit.v3.RateLimitService';
const RLS_FILE = 'envoy/service/ratelimit/v3/rls.proto';
const RLQS = 'envoy.service.rate_limit_quota.v3.RateLimitQuotaService';
const SERVICES = [RLQS, RLS, 'grpc.health.v1.Health', 'grpc.reflection.v1.ServerReflection', 'grpc.reflection.v1alpha.ServerReflection'];

// Every file after its imports. protobuf-es' resolver form of createFileRegistry misorders a file
// imported both directly and through another import (RLQS: google/protobuf/duration.proto), so the
// registry is built from a set in this order instead.
function dependenciesFirst(files: Map<string, FileDescriptorProto>): FileDescriptorProto[] {
  const out: FileDescriptorProto[] = [];
  const placed = new Set<string>();
  const place = (name: string) => {
    if (placed.has(name)) return;
    placed.add(name);
    const file = files.get(name)!;
    for (const dep of file.dependency) place(dep);
    out.push(file);
  };
  for (const name of files.keys()) place(name);
  return out;
}

type Request = v1.ServerReflectionRequest['messageRequest'];
type Response = v1.ServerReflectionResponse;
type ReflectionClient = v1.ServerReflectionClient | v1alpha.ServerReflectionClient;

// One reflection stream: each request gets the next response, in order.
class ReflectionStream {
  private readonly stream: grpc.ClientDuplexStream<v1.ServerReflectionRequest, Response>;
  private readonly waiting: { resolve: (r: Response) => void; reject: (e: Error) => void }[] = [];

  constructor(client: ReflectionClient) {
    this.stream = client.serverReflectionInfo();
    this.stream.on('data', (r: Response) => this.waiting.shift()?.resolve(r));
    this.stream.on('error', (e: Error) => this.waiting.splice(0).forEach((w) => w.reject(e)));
  }

  ask(messageRequest: Request): Promise<Response> {
    return new Promise((resolve, reject) => {
      this.waiting.push({ resolve, reject });
      this.stream.write({ host: '', messageRequest });
    });
  }

  async files(messageRequest: Request): Promise<FileDescriptorProto[]> {
    const r = (await this.ask(messageRequest)).messageResponse;
    assert.equal(r?.$case, 'fileDescriptorResponse', JSON.stringify(r));
    return r.value.fileDescriptorProto.map((bytes) => fromBinary(FileDescriptorProtoSchema, bytes));
  }

  close(): void {
    this.stream.end();
  }
}

function unaryRaw(client: grpc.Client, method: string, request: Uint8Array): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    const identity = (b: Buffer) => b;
    client.makeUnaryRequest(method, identity, identity, Buffer.from(request), (err, response) => (err ? reject(err) : resolve(response!)));
  });
}

for (const [version, Client] of [
  ['v1', v1.ServerReflectionClient],
  ['v1alpha', v1alpha.ServerReflectionClient],
] as const) {
  describe(`gRPC server reflection ${version}, as a strict client uses it`, () => {
    let s: Running;
    let client: ReflectionClient;
    before(async () => {
      s = await startApp({ configPaths: [EXAMPLE] }, { clock: new ManualClock(T0) });
      client = new Client(`127.0.0.1:${s.grpcPort}`, grpc.credentials.createInsecure());
    });
    after(async () => {
      client.close();
      await s.stop();
    });

    test('list_services names the RLS, RLQS, health and both reflection services', async () => {
      const stream = new ReflectionStream(client);
      const r = await stream.ask({ $case: 'listServices', value: '' });
      stream.close();
      assert.equal(r.messageResponse?.$case, 'listServicesResponse');
      assert.deepEqual(
        r.messageResponse.value.service.map((x) => x.name),
        SERVICES,
      );
    });

    test('every listed service resolves: its file and all imports by file name, with fully qualified types', async () => {
      for (const service of SERVICES) {
        const stream = new ReflectionStream(client);
        const first = await stream.files({ $case: 'fileContainingSymbol', value: service });
        // The file itself first; grpc-go adds the imports not yet sent, which we ask for by name below anyway.
        const files = new Map<string, FileDescriptorProto>([[first[0].name, first[0]]]);
        assert.ok(
          first[0].service.some((x) => `${first[0].package}.${x.name}` === service),
          `${service} is in ${first[0].name}`,
        );
        for (let pending = first[0].dependency; pending.length > 0; ) {
          const name = pending[0];
          const [file] = await stream.files({ $case: 'fileByFilename', value: name });
          assert.equal(file.name, name);
          files.set(name, file);
          pending = [...files.values()].flatMap((f) => f.dependency).filter((dep) => !files.has(dep));
        }
        stream.close();
        assert.deepEqual(first.map((f) => f.name).sort(), [...files.keys()].sort(), `the first answer for ${service} carried the closure`);
        const registry = createFileRegistry(create(FileDescriptorSetSchema, { file: dependenciesFirst(files) }));
        assert.ok(registry.getService(service), service);
      }
    });

    test('ShouldRateLimit encoded from JSON and decoded through the reflected types only', async () => {
      const stream = new ReflectionStream(client);
      const files = new Map((await stream.files({ $case: 'fileContainingSymbol', value: RLS })).map((f) => [f.name, f]));
      stream.close();
      const rls = files.get(RLS_FILE)!;
      const descriptors = rls.messageType.find((m) => m.name === 'RateLimitRequest')!.field.find((f) => f.name === 'descriptors')!;
      assert.equal(descriptors.typeName, '.envoy.extensions.common.ratelimit.v3.RateLimitDescriptor');
      const method = createFileRegistry(rls, (name) => files.get(name))
        .getService(RLS)!
        .methods.find((m) => m.name === 'ShouldRateLimit')!;
      const request = fromJson(method.input, {
        domain: 'edge',
        descriptors: [
          { entries: [{ key: 'tenant', value: 'acme' }] },
          {
            entries: [
              { key: 'tenant', value: 'acme' },
              { key: 'route', value: '/v1/payments/checkout' },
            ],
          },
        ],
      });
      const raw = new grpc.Client(`127.0.0.1:${s.grpcPort}`, grpc.credentials.createInsecure());
      try {
        const answer = await unaryRaw(raw, `/${RLS}/ShouldRateLimit`, toBinary(method.input, request));
        assert.deepEqual(toJson(method.output, fromBinary(method.output, answer)), {
          overallCode: 'OK',
          statuses: [
            { code: 'OK', currentLimit: { name: 'tenant_free', requestsPerUnit: 10, unit: 'MINUTE' }, limitRemaining: 9, durationUntilReset: '60s' },
            // A hit in a sliding window weighs on the next window too: it is forgotten 2 × 5 minutes on.
            { code: 'OK', currentLimit: { name: 'checkout_free', requestsPerUnit: 3, unit: 'MINUTE' }, limitRemaining: 2, durationUntilReset: '600s' },
          ],
        });
      } finally {
        raw.close();
      }
    });

    test('file_containing_symbol answers for a method, nested message, enums, enum value and field', async () => {
      const stream = new ReflectionStream(client);
      const fileOf = async (symbol: string) => (await stream.files({ $case: 'fileContainingSymbol', value: symbol }))[0].name;
      assert.equal(await fileOf(`${RLS}.ShouldRateLimit`), RLS_FILE);
      assert.equal(await fileOf('envoy.service.ratelimit.v3.RateLimitResponse.DescriptorStatus'), RLS_FILE);
      assert.equal(await fileOf('envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.Entry'), 'envoy/extensions/common/ratelimit/v3/ratelimit.proto');
      assert.equal(await fileOf('envoy.service.ratelimit.v3.RateLimitResponse.Code'), RLS_FILE);
      assert.equal(await fileOf('envoy.service.ratelimit.v3.RateLimitResponse.OVER_LIMIT'), RLS_FILE);
      assert.equal(await fileOf('envoy.type.v3.RateLimitUnit'), 'envoy/type/v3/ratelimit_unit.proto');
      assert.equal(await fileOf('envoy.service.ratelimit.v3.RateLimitRequest.hits_addend'), RLS_FILE);
      assert.equal(await fileOf('google.protobuf.Duration'), 'google/protobuf/duration.proto');
      stream.close();
    });

    test('unknown symbols, files and types answer NOT_FOUND in the stream, which stays open', async () => {
      const stream = new ReflectionStream(client);
      for (const messageRequest of [
        { $case: 'fileContainingSymbol', value: 'envoy.service.ratelimit.v3.Nope' },
        { $case: 'fileContainingSymbol', value: 'RateLimitRequest' }, // not fully qualified
        { $case: 'fileByFilename', value: 'rls.proto' },
        { $case: 'allExtensionNumbersOfType', value: 'nope.Nope' },
        { $case: 'fileContainingExtension', value: { containingType: 'envoy.service.ratelimit.v3.RateLimitRequest', extensionNumber: 1000 } },
      ] as Request[]) {
        const r = await stream.ask(messageRequest);
        assert.equal(r.messageResponse?.$case, 'errorResponse', JSON.stringify(messageRequest));
        assert.equal(r.messageResponse.value.errorCode, grpc.status.NOT_FOUND);
        assert.deepEqual(r.originalRequest?.messageRequest, messageRequest);
      }
      const numbers = await stream.ask({ $case: 'allExtensionNumbersOfType', value: 'envoy.service.ratelimit.v3.RateLimitRequest' });
      assert.deepEqual(numbers.messageResponse, {
        $case: 'allExtensionNumbersResponse',
        value: { baseTypeName: 'envoy.service.ratelimit.v3.RateLimitRequest', extensionNumber: [] },
      });
      assert.equal((await stream.files({ $case: 'fileByFilename', value: RLS_FILE }))[0].name, RLS_FILE);
      stream.close();
    });

    test('a request asking nothing ends the stream with INVALID_ARGUMENT, as grpc-go does', async () => {
      const stream = new ReflectionStream(client);
      await assert.rejects(stream.ask(undefined), (err: grpc.ServiceError) => err.code === grpc.status.INVALID_ARGUMENT);
    });
  });
}
