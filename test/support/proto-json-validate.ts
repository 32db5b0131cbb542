import fs from 'node:fs';
import path from 'node:path';
import protobuf from 'protobufjs';

// Strict validation of YAML/JSON config (Envoy bootstrap, xDS fragments) against protobuf messages,
// following the proto3 JSON mapping as Envoy applies it: unknown fields are errors, snake_case and
// lowerCamelCase names are both accepted, google.protobuf.Any is resolved through its `@type`.
// Protos are loaded lazily, one package directory at a time, so an Any can name any message of the
// include directories without loading all of them up front.

export interface ProtoJsonError {
  // Where, in the document: `static_resources.clusters[1].typed_extension_protocol_options["…"]`.
  path: string;
  message: string;
}

export interface ValidateOptions {
  // Path prefix of the value inside its document.
  at?: string;
  // A fragment merged into a larger message (Istio EnvoyFilter MERGE): required-field rules are skipped.
  partial?: boolean;
}

export function formatProtoJsonError(e: ProtoJsonError): string {
  return e.path === '' ? e.message : `${e.path}: ${e.message}`;
}

// Envoy's published protos as shipped by @grpc/grpc-js-xds, plus protobufjs' google/protobuf files.
export function envoyProtoDirs(): string[] {
  const deps = path.join(path.dirname(require.resolve('@grpc/grpc-js-xds/package.json')), 'deps');
  const dirs = ['envoy-api', 'googleapis', 'protoc-gen-validate', 'xds'].map((d) => path.join(deps, d));
  return [...dirs, path.dirname(require.resolve('protobufjs/package.json'))];
}

const TYPE_URL_PREFIX = 'type.googleapis.com/';

type Check = (value: unknown, at: string, walk: Walk) => void;

interface Walk {
  errors: ProtoJsonError[];
  partial: boolean;
  resolve(fullName: string): protobuf.Type | undefined;
}

export class ProtoJsonValidator {
  private readonly root = new protobuf.Root();
  private readonly triedPackages = new Set<string>();

  constructor(private readonly includeDirs: string[]) {
    this.root.resolvePath = (_origin, target) => this.locate(target) ?? target;
  }

  validate(value: unknown, typeName: string, options: ValidateOptions = {}): ProtoJsonError[] {
    const at = options.at ?? '';
    const type = this.messageType(typeName);
    if (type === undefined) return [{ path: at, message: `unknown message type '${typeName}'` }];
    const walk: Walk = { errors: [], partial: options.partial ?? false, resolve: (n) => this.messageType(n) };
    checkMessage(value, type, at, walk);
    return walk.errors;
  }

  messageType(fullName: string): protobuf.Type | undefined {
    return this.find(fullName) ?? (this.loadPackageOf(fullName) ? this.find(fullName) : undefined);
  }

  private find(fullName: string): protobuf.Type | undefined {
    const found = this.root.lookup('.' + fullName);
    return found instanceof protobuf.Type ? found : undefined;
  }

  private locate(file: string): string | undefined {
    for (const dir of this.includeDirs) {
      const candidate = path.join(dir, file);
      if (fs.existsSync(candidate)) return candidate;
    }
    return undefined;
  }

  // Protobuf packages are lower case and message names capitalised, so the package of
  // `envoy.config.route.v3.RateLimit.Action` is its leading lower-case segments.
  private loadPackageOf(fullName: string): boolean {
    const segments = fullName.split('.');
    const firstType = segments.findIndex((s) => /^[A-Z]/.test(s));
    const pkgDir = segments.slice(0, firstType < 0 ? segments.length : firstType).join('/');
    if (this.triedPackages.has(pkgDir)) return false;
    this.triedPackages.add(pkgDir);
    const dir = this.locate(pkgDir);
    if (dir === undefined || !fs.statSync(dir).isDirectory()) return false;
    const files = fs
      .readdirSync(dir)
      .filter((f) => f.endsWith('.proto'))
      .map((f) => `${pkgDir}/${f}`);
    if (files.length === 0) return false;
    this.root.loadSync(files, { keepCase: true });
    this.root.resolveAll();
    return true;
  }
}

// ---- messages -------------------------------------------------------------------------------

const fieldIndexes = new WeakMap<protobuf.Type, Map<string, protobuf.Field>>();

// proto3 JSON: the default json_name drops each underscore and capitalises the next letter.
function jsonName(field: protobuf.Field): string {
  const explicit = (field.options as Record<string, unknown> | undefined)?.json_name;
  if (typeof explicit === 'string') return explicit;
  return field.name.replace(/_([a-z0-9])/g, (_m, c: string) => c.toUpperCase());
}

function fieldIndex(type: protobuf.Type): Map<string, protobuf.Field> {
  let index = fieldIndexes.get(type);
  if (index === undefined) {
    index = new Map();
    for (const field of type.fieldsArray) {
      index.set(field.name, field);
      index.set(jsonName(field), field);
    }
    fieldIndexes.set(type, index);
  }
  return index;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'a list';
  if (typeof v === 'object') return 'an object';
  return `${typeof v} ${JSON.stringify(v)}`;
}

function fail(walk: Walk, at: string, message: string): void {
  walk.errors.push({ path: at, message });
}

function child(at: string, key: string): string {
  return at === '' ? key : `${at}.${key}`;
}

function shortName(type: protobuf.ReflectionObject): string {
  return type.fullName.replace(/^\./, '');
}

function checkMessage(value: unknown, type: protobuf.Type, at: string, walk: Walk): void {
  const special = WELL_KNOWN[shortName(type)];
  if (special !== undefined) return special(value, at, walk);
  if (!isObject(value)) return fail(walk, at, `expected an object (${shortName(type)}), got ${describe(value)}`);
  const given = new Map<protobuf.Field, string>();
  for (const [key, v] of Object.entries(value)) {
    const field = fieldIndex(type).get(key);
    if (field === undefined) {
      fail(walk, at, `unknown field '${key}' in ${shortName(type)}`);
    } else if (given.has(field)) {
      fail(walk, at, `field '${key}' given twice (also as '${given.get(field)}')`);
    } else {
      given.set(field, key);
      if (field.options?.deprecated === true) fail(walk, at, `deprecated field '${key}' in ${shortName(type)}`);
      checkField(v, field, child(at, key), walk);
    }
  }
  checkOneofs(type, given, at, walk);
  if (!walk.partial) checkRequired(type, value, given, at, walk);
}

function checkOneofs(type: protobuf.Type, given: Map<protobuf.Field, string>, at: string, walk: Walk): void {
  for (const oneof of type.oneofsArray) {
    const set = [...given].filter(([f]) => f.partOf === oneof).map(([, key]) => `'${key}'`);
    if (set.length > 1) fail(walk, at, `${set.join(' and ')} exclude each other (oneof '${oneof.name}')`);
    if (set.length === 0 && !walk.partial && oneof.options?.['(validate.required)'] === true) {
      fail(walk, at, `one of ${oneof.fieldsArray.map((f) => `'${f.name}'`).join(', ')} is required`);
    }
  }
}

// The protoc-gen-validate rules Envoy enforces that most often bite hand-written config. A oneof
// member that is not set carries no rules.
function checkRequired(type: protobuf.Type, value: Record<string, unknown>, given: Map<protobuf.Field, string>, at: string, walk: Walk): void {
  for (const field of type.fieldsArray) {
    const present = given.has(field);
    if (field.partOf !== null && !present) continue;
    const rules = (field.options ?? {}) as Record<string, unknown>;
    const v = present ? value[given.get(field)!] : undefined;
    if (rules['(validate.rules).message.required'] === true && !present) {
      fail(walk, at, `missing required field '${field.name}' in ${shortName(type)}`);
    }
    const minLen = rules['(validate.rules).string.min_len'];
    if (typeof minLen === 'number' && minLen > 0 && rules['(validate.rules).string.ignore_empty'] !== true && (v ?? '') === '') {
      fail(walk, at, `field '${field.name}' of ${shortName(type)} must not be empty`);
    }
    const minItems = rules['(validate.rules).repeated.min_items'];
    const itemsRequired = typeof minItems === 'number' && minItems > 0 && rules['(validate.rules).repeated.ignore_empty'] !== true;
    if (itemsRequired && (Array.isArray(v) ? v.length < minItems : !present)) {
      fail(walk, at, `field '${field.name}' of ${shortName(type)} needs at least ${minItems} item(s)`);
    }
  }
}

function checkField(value: unknown, field: protobuf.Field, at: string, walk: Walk): void {
  if (field instanceof protobuf.MapField) {
    if (!isObject(value)) return fail(walk, at, `expected a map (object), got ${describe(value)}`);
    const keyType = field.keyType;
    for (const [k, v] of Object.entries(value)) {
      const keyAt = `${at}[${JSON.stringify(k)}]`;
      if (keyType !== 'string' && keyType !== 'bool') checkScalar(k, keyType, keyAt, walk);
      checkSingle(v, field, keyAt, walk);
    }
    return;
  }
  if (field.repeated) {
    if (!Array.isArray(value)) return fail(walk, at, `expected a list, got ${describe(value)}`);
    value.forEach((v, i) => checkSingle(v, field, `${at}[${i}]`, walk));
    return;
  }
  checkSingle(value, field, at, walk);
}

function checkSingle(value: unknown, field: protobuf.Field, at: string, walk: Walk): void {
  const t = field.resolvedType;
  if (t instanceof protobuf.Type) return checkMessage(value, t, at, walk);
  if (t instanceof protobuf.Enum) return checkEnum(value, t, at, walk);
  checkScalar(value, field.type, at, walk);
}

function checkEnum(value: unknown, e: protobuf.Enum, at: string, walk: Walk): void {
  if (shortName(e) === 'google.protobuf.NullValue') {
    if (value !== null) fail(walk, at, `expected null, got ${describe(value)}`);
    return;
  }
  const known = typeof value === 'string' ? value in e.values : Number.isInteger(value) && Object.values(e.values).includes(value as number);
  if (!known) {
    fail(walk, at, `expected one of ${Object.keys(e.values).join(', ')} (${shortName(e)}), got ${describe(value)}`);
  } else if (typeof value === 'string' && e.valuesOptions?.[value]?.deprecated === true) {
    fail(walk, at, `deprecated value ${value} of ${shortName(e)}`);
  }
}

// ---- scalars --------------------------------------------------------------------------------

const INT32 = { min: -(2 ** 31), max: 2 ** 31 - 1 };
const UINT32 = { min: 0, max: 2 ** 32 - 1 };
const INT64 = { min: -(2 ** 63), max: 2 ** 63 };
const UINT64 = { min: 0, max: 2 ** 64 };
const INTEGER_RANGES: Record<string, { min: number; max: number }> = {
  int32: INT32,
  sint32: INT32,
  sfixed32: INT32,
  uint32: UINT32,
  fixed32: UINT32,
  int64: INT64,
  sint64: INT64,
  sfixed64: INT64,
  uint64: UINT64,
  fixed64: UINT64,
};

// proto3 JSON accepts integers as numbers or decimal strings (64-bit ones are usually strings).
function checkInteger(value: unknown, type: string, at: string, walk: Walk): void {
  const range = INTEGER_RANGES[type];
  const n = typeof value === 'string' && /^-?\d+$/.test(value) ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isInteger(n)) return fail(walk, at, `expected an integer (${type}), got ${describe(value)}`);
  if (n < range.min || n > range.max) fail(walk, at, `${n} is out of range for ${type}`);
}

const isFloat = (v: unknown) =>
  typeof v === 'number' || (typeof v === 'string' && (/^(NaN|-?Infinity)$/.test(v) || (v.trim() !== '' && Number.isFinite(Number(v)))));
const OTHER_SCALARS: Record<string, (v: unknown) => boolean> = {
  string: (v) => typeof v === 'string',
  bool: (v) => typeof v === 'boolean',
  // Standard or URL-safe base64, as proto3 JSON accepts both.
  bytes: (v) => typeof v === 'string' && /^[A-Za-z0-9+/\-_]*={0,2}$/.test(v),
  double: isFloat,
  float: isFloat,
};

function checkScalar(value: unknown, type: string, at: string, walk: Walk): void {
  if (type in INTEGER_RANGES) return checkInteger(value, type, at, walk);
  const check = OTHER_SCALARS[type];
  if (check === undefined) return fail(walk, at, `unsupported scalar type ${type}`);
  if (!check(value)) fail(walk, at, `expected ${type === 'bytes' ? 'base64 bytes' : `a ${type}`}, got ${describe(value)}`);
}

// ---- well-known types -----------------------------------------------------------------------

function stringMatching(pattern: RegExp, what: string): Check {
  return (value, at, walk) => {
    if (typeof value !== 'string' || !pattern.test(value)) fail(walk, at, `expected ${what}, got ${describe(value)}`);
  };
}

function scalarWrapper(type: string): Check {
  return (value, at, walk) => checkScalar(value, type, at, walk);
}

function checkAny(value: unknown, at: string, walk: Walk): void {
  if (!isObject(value)) return fail(walk, at, `expected an object with '@type' (google.protobuf.Any), got ${describe(value)}`);
  const url = value['@type'];
  if (typeof url !== 'string') return fail(walk, at, `missing '@type' (google.protobuf.Any)`);
  if (!url.startsWith(TYPE_URL_PREFIX)) return fail(walk, at, `'@type' ${url} must start with ${TYPE_URL_PREFIX}`);
  const name = url.slice(TYPE_URL_PREFIX.length);
  const type = walk.resolve(name);
  if (type === undefined) return fail(walk, at, `'@type' ${url} does not name a known message`);
  const { ['@type']: _url, ...rest } = value;
  // A well-known type with its own JSON form sits under "value" inside an Any.
  if (WELL_KNOWN[name] !== undefined) {
    const extra = Object.keys(rest).filter((k) => k !== 'value');
    if (extra.length > 0) fail(walk, at, `unknown field '${extra[0]}' in an Any holding ${name} (expected only 'value')`);
    return WELL_KNOWN[name](rest.value, child(at, 'value'), walk);
  }
  checkMessage(rest, type, at, walk);
}

const WELL_KNOWN: Record<string, Check> = {
  'google.protobuf.Any': checkAny,
  'google.protobuf.Duration': stringMatching(/^-?\d+(\.\d{1,9})?s$/, 'a duration such as "0.25s"'),
  'google.protobuf.Timestamp': stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$/, 'an RFC 3339 timestamp'),
  'google.protobuf.FieldMask': stringMatching(/^[A-Za-z0-9_.,]*$/, 'a field mask such as "a.b,c"'),
  'google.protobuf.Struct': (v, at, walk) => {
    if (!isObject(v)) fail(walk, at, `expected an object (google.protobuf.Struct), got ${describe(v)}`);
  },
  'google.protobuf.ListValue': (v, at, walk) => {
    if (!Array.isArray(v)) fail(walk, at, `expected a list (google.protobuf.ListValue), got ${describe(v)}`);
  },
  'google.protobuf.Value': () => undefined,
  'google.protobuf.DoubleValue': scalarWrapper('double'),
  'google.protobuf.FloatValue': scalarWrapper('float'),
  'google.protobuf.Int64Value': scalarWrapper('int64'),
  'google.protobuf.UInt64Value': scalarWrapper('uint64'),
  'google.protobuf.Int32Value': scalarWrapper('int32'),
  'google.protobuf.UInt32Value': scalarWrapper('uint32'),
  'google.protobuf.BoolValue': scalarWrapper('bool'),
  'google.protobuf.StringValue': scalarWrapper('string'),
  'google.protobuf.BytesValue': scalarWrapper('bytes'),
};
