import { BinaryReader, WireType } from '@bufbuild/protobuf/wire';
import { InvalidRequestError } from '../errors';
import { RateLimitRequest as PbRequest } from '../gen/envoy/service/ratelimit/v3/rls';
import { checkEntryCount, overBound, type RequestBounds } from './request';

// The gRPC deserializer of ShouldRateLimit (the generated one is RateLimitRequest.decode). Two
// things it adds, without touching the generated code:
// - Counts descriptors and entries on the raw bytes before anything is decoded, so an oversized
//   request costs one cheap walk over its tags instead of an object per field.
// - Decodes strings strictly: the generated decoder hands every nested message the same reader,
//   and a reader built with a fatal UTF-8 decoder throws on invalid UTF-8 where the default one
//   substitutes U+FFFD (which would let different byte strings share one counter).
// Every failure is an InvalidRequestError, never the INTERNAL grpc-js reports for a throwing
// deserializer.

const fatalUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
const strictUtf8 = (bytes: Uint8Array): string => fatalUtf8.decode(bytes);

// Field numbers: RateLimitRequest.descriptors = 2; RateLimitDescriptor.entries = 1.
const DESCRIPTORS = 2;
const ENTRIES = 1;

// Descriptors from the reader's position (just after a descriptor's tag) to the end, that one
// included: a skip each, no decoding, over a message already within MAX_REQUEST_BYTES. Undefined
// when the rest is malformed, so the error can still say "more than".
function countRest(reader: BinaryReader): number | undefined {
  try {
    let n = 1;
    reader.skip(WireType.LengthDelimited, DESCRIPTORS);
    while (reader.pos < reader.len) {
      const [field, wireType] = reader.tag();
      if (field === DESCRIPTORS && wireType === WireType.LengthDelimited) n++;
      reader.skip(wireType, field);
    }
    return n;
  } catch {
    return undefined;
  }
}

function countFields(bytes: Uint8Array, bounds: RequestBounds): void {
  const reader = new BinaryReader(bytes);
  let descriptors = 0;
  while (reader.pos < reader.len) {
    const [field, wireType] = reader.tag();
    if (field === DESCRIPTORS && wireType === WireType.LengthDelimited) {
      // Past the bound, count the rest, so that the error gives the real number, not bound + 1.
      if (descriptors === bounds.maxDescriptors) {
        const rest = countRest(reader);
        throw overBound('request', rest === undefined ? `more than ${descriptors}` : descriptors + rest, 'maxDescriptors', bounds, 'descriptors');
      }
      descriptors++;
      const end = reader.uint32() + reader.pos;
      let entries = 0;
      while (reader.pos < end) {
        const [f, w] = reader.tag();
        if (f === ENTRIES && w === WireType.LengthDelimited) checkEntryCount(descriptors - 1, ++entries, bounds);
        reader.skip(w, f);
      }
      if (reader.pos !== end) throw new RangeError('descriptor overruns its length');
    } else {
      reader.skip(wireType, field);
    }
  }
}

export function decodeRequest(bytes: Uint8Array, bounds: RequestBounds): PbRequest {
  try {
    countFields(bytes, bounds);
    return PbRequest.decode(new BinaryReader(bytes, strictUtf8));
  } catch (err) {
    if (err instanceof InvalidRequestError) throw err;
    const reason = err instanceof TypeError && /encoded data|utf-8/i.test(err.message) ? 'a string is not valid UTF-8' : (err as Error).message;
    throw new InvalidRequestError(`malformed RateLimitRequest: ${reason}`);
  }
}
