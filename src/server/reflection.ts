import { readFileSync } from 'node:fs';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { createFileRegistry, type DescEnum, type DescExtension, type DescMessage, fromBinary } from '@bufbuild/protobuf';
import { BinaryReader, WireType } from '@bufbuild/protobuf/wire';
import { FileDescriptorSetSchema } from '@bufbuild/protobuf/wkt';
import { type ServerReflectionRequest, type ServerReflectionResponse, ServerReflectionService as ReflectionV1 } from '../gen/grpc/reflection/v1/reflection';
import { ServerReflectionService as ReflectionV1Alpha } from '../gen/grpc/reflection/v1alpha/reflection';

// Written by `npm run gen` (buf build) in the same step as src/gen, and copied next to the compiled
// code by `npm run build`: the FileDescriptorProtos of every proto the server speaks and of their
// imports, exactly as the compiler produced them. Served as they are, a strict client (grpcurl,
// protobuf-go, protobuf-es) resolves every type by its fully qualified name and every import by
// file name, which descriptors rebuilt from a proto-loader definition did not allow.
export const DESCRIPTOR_SET = path.resolve(__dirname, '../gen/descriptors.binpb');

interface FileEntry {
  bytes: Buffer;
  imports: string[];
}

// A lookup that finds nothing (answered in the stream) and a request asking nothing (ends it).
class NotFound extends Error {}
class InvalidRequest extends Error {}

export class Descriptors {
  private readonly files = new Map<string, FileEntry>();
  // Fully qualified name of every service, method, message, field, oneof, enum, enum value and
  // extension → the file defining it: what protobuf-go's FindDescriptorByName answers for grpc-go.
  private readonly symbols = new Map<string, string>();
  private readonly extensions = new Map<string, Map<number, string>>();

  // Throws when a reference in the set does not resolve, so a stale set fails at start.
  constructor(set: Uint8Array) {
    const raw = rawFiles(set);
    const registry = createFileRegistry(fromBinary(FileDescriptorSetSchema, set));
    for (const file of registry.files) {
      const name = file.proto.name;
      const bytes = raw.get(name);
      if (!bytes) throw new Error(`descriptor set: no bytes for ${name}`);
      this.files.set(name, { bytes, imports: file.proto.dependency });
      for (const service of file.services) {
        this.symbols.set(service.typeName, name);
        for (const method of service.methods) this.symbols.set(`${service.typeName}.${method.name}`, name);
      }
      for (const message of file.messages) this.addMessage(message, name);
      for (const e of file.enums) this.addEnum(e, name);
      for (const ext of file.extensions) this.addExtension(ext, name);
    }
  }

  private static loaded: Descriptors | undefined;

  static load(): Descriptors {
    Descriptors.loaded ??= new Descriptors(readFileSync(DESCRIPTOR_SET));
    return Descriptors.loaded;
  }

  has(symbol: string): boolean {
    return this.symbols.has(symbol);
  }

  fileByName(name: string, sent: Set<string>): Buffer[] {
    if (!this.files.has(name)) throw new NotFound(`file not found: ${name}`);
    return this.withImports(name, sent);
  }

  fileContainingSymbol(symbol: string, sent: Set<string>): Buffer[] {
    const file = this.symbols.get(symbol);
    if (!file) throw new NotFound(`symbol not found: ${symbol}`);
    return this.withImports(file, sent);
  }

  fileContainingExtension(extendee: string, number: number, sent: Set<string>): Buffer[] {
    const file = this.extensions.get(extendee)?.get(number);
    if (!file) throw new NotFound(`extension not found: ${extendee} ${number}`);
    return this.withImports(file, sent);
  }

  extensionNumbers(extendee: string): number[] {
    const numbers = [...(this.extensions.get(extendee)?.keys() ?? [])].sort((a, b) => a - b);
    if (numbers.length === 0 && !this.symbols.has(extendee)) throw new NotFound(`type not found: ${extendee}`);
    return numbers;
  }

  // As grpc-go: the requested file always, then its transitive imports breadth first, each at most
  // once per stream, so a client never waits for a second round trip to resolve a reference.
  private withImports(root: string, sent: Set<string>): Buffer[] {
    const out: Buffer[] = [];
    const queue = [root];
    for (let name = queue.shift(); name !== undefined; name = queue.shift()) {
      const file = this.files.get(name);
      if (!file) continue;
      if (out.length === 0 || !sent.has(name)) {
        sent.add(name);
        out.push(file.bytes);
        queue.push(...file.imports);
      }
    }
    return out;
  }

  private addMessage(message: DescMessage, file: string): void {
    this.symbols.set(message.typeName, file);
    for (const field of message.fields) this.symbols.set(`${message.typeName}.${field.name}`, file);
    for (const oneof of message.oneofs) this.symbols.set(`${message.typeName}.${oneof.name}`, file);
    for (const nested of message.nestedMessages) this.addMessage(nested, file);
    for (const e of message.nestedEnums) this.addEnum(e, file);
    for (const ext of message.nestedExtensions) this.addExtension(ext, file);
  }

  private addEnum(e: DescEnum, file: string): void {
    this.symbols.set(e.typeName, file);
    // Enum values are scoped as siblings of their enum (C++ rules), not inside it.
    const scope = e.typeName.slice(0, e.typeName.length - e.name.length);
    for (const value of e.values) this.symbols.set(`${scope}${value.name}`, file);
  }

  private addExtension(ext: DescExtension, file: string): void {
    this.symbols.set(ext.typeName, file);
    const byNumber = this.extensions.get(ext.extendee.typeName) ?? new Map<number, string>();
    byNumber.set(ext.number, file);
    this.extensions.set(ext.extendee.typeName, byNumber);
  }
}

// The serialized FileDescriptorProtos of a FileDescriptorSet (field 1), byte for byte.
function rawFiles(set: Uint8Array): Map<string, Buffer> {
  const out = new Map<string, Buffer>();
  const reader = new BinaryReader(set);
  while (reader.pos < reader.len) {
    const [field, wireType] = reader.tag();
    if (field !== 1 || wireType !== WireType.LengthDelimited) {
      reader.skip(wireType, field);
      continue;
    }
    const bytes = Buffer.from(reader.bytes());
    out.set(fileName(bytes), bytes);
  }
  return out;
}

function fileName(fileDescriptorProto: Uint8Array): string {
  const reader = new BinaryReader(fileDescriptorProto);
  while (reader.pos < reader.len) {
    const [field, wireType] = reader.tag();
    if (field === 1 && wireType === WireType.LengthDelimited) return reader.string();
    reader.skip(wireType, field);
  }
  throw new Error('descriptor set: a file has no name');
}

type Answer = NonNullable<ServerReflectionResponse['messageResponse']>;

function answer(request: ServerReflectionRequest, ctx: { descriptors: Descriptors; services: string[]; sent: Set<string> }): Answer {
  const { descriptors, services, sent } = ctx;
  const files = (fileDescriptorProto: Buffer[]): Answer => ({ $case: 'fileDescriptorResponse', value: { fileDescriptorProto } });
  const q = request.messageRequest;
  try {
    switch (q?.$case) {
      case 'fileByFilename':
        return files(descriptors.fileByName(q.value, sent));
      case 'fileContainingSymbol':
        return files(descriptors.fileContainingSymbol(q.value, sent));
      case 'fileContainingExtension':
        return files(descriptors.fileContainingExtension(q.value.containingType, q.value.extensionNumber, sent));
      case 'allExtensionNumbersOfType':
        return { $case: 'allExtensionNumbersResponse', value: { baseTypeName: q.value, extensionNumber: descriptors.extensionNumbers(q.value) } };
      case 'listServices':
        return { $case: 'listServicesResponse', value: { service: services.map((name) => ({ name })) } };
      default:
        throw new InvalidRequest('invalid reflection request: no message_request');
    }
  } catch (err) {
    // grpc-go answers a lookup that finds nothing in the stream, which stays open.
    if (err instanceof NotFound) return { $case: 'errorResponse', value: { errorCode: grpc.status.NOT_FOUND, errorMessage: err.message } };
    throw err;
  }
}

function reflectionImpl(descriptors: Descriptors, services: string[]): grpc.UntypedServiceImplementation {
  return {
    serverReflectionInfo(call: grpc.ServerDuplexStream<ServerReflectionRequest, ServerReflectionResponse>) {
      const sent = new Set<string>();
      let failed = false;
      call.on('data', (request: ServerReflectionRequest) => {
        if (failed) return;
        let messageResponse: Answer;
        try {
          messageResponse = answer(request, { descriptors, services, sent });
        } catch (err) {
          // As grpc-go: a request naming no known question ends the stream.
          failed = true;
          const code = err instanceof InvalidRequest ? grpc.status.INVALID_ARGUMENT : grpc.status.INTERNAL;
          call.emit('error', { code, details: err instanceof Error ? err.message : String(err) });
          return;
        }
        call.write({ validHost: request.host, originalRequest: request, messageResponse });
      });
      call.on('end', () => failed || call.end());
    },
  };
}

// The fully qualified name of a grpc-js service definition, from its first method's path
// ("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit").
function serviceName(definition: grpc.ServiceDefinition): string {
  const first = Object.values(definition)[0];
  return first.path.slice(1, first.path.lastIndexOf('/'));
}

// grpc.reflection.v1 and v1alpha, listing the given services and themselves, as grpc-go does.
// Throws when a listed service is missing from the descriptor set (run `npm run gen`).
export function reflectionServices(
  served: grpc.ServiceDefinition[],
  descriptors = Descriptors.load(),
): [grpc.ServiceDefinition, grpc.UntypedServiceImplementation][] {
  const reflection = [ReflectionV1, ReflectionV1Alpha] as grpc.ServiceDefinition[];
  const services = [...served, ...reflection].map(serviceName).sort();
  const missing = services.filter((name) => !descriptors.has(name));
  if (missing.length > 0) throw new Error(`${DESCRIPTOR_SET} lacks ${missing.join(', ')}: run npm run gen`);
  const impl = reflectionImpl(descriptors, services);
  return reflection.map((definition) => [definition, impl]);
}
