/**
 * The data of a snapshot the node writes: the members' addresses beside the application's
 * image, so a node that installs a snapshot from the leader can reach every member, including
 * ones added by conf changes the snapshot now covers.
 *
 * Layout: `u8 version (1) | u32le length of the address JSON | address JSON | application bytes`.
 * Empty data (the bootstrap snapshot) holds no addresses and the empty application state.
 */
import { InvariantError } from '../core/errors.js';
import type { NodeId } from '../core/types.js';

const VERSION = 1;
const HEADER = 5;

export function encodeNodeSnapshot(addresses: ReadonlyMap<NodeId, string>, app: Uint8Array): Uint8Array {
  const json = Buffer.from(JSON.stringify(Object.fromEntries(addresses)), 'utf8');
  const out = Buffer.allocUnsafe(HEADER + json.byteLength + app.byteLength);
  out[0] = VERSION;
  out.writeUInt32LE(json.byteLength, 1);
  json.copy(out, HEADER);
  out.set(app, HEADER + json.byteLength);
  return out;
}

export function decodeNodeSnapshot(data: Uint8Array): { addresses: Map<NodeId, string>; app: Uint8Array } {
  const addresses = new Map<NodeId, string>();
  if (data.byteLength === 0) return { addresses, app: data };
  const buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  if (buf.byteLength < HEADER || buf[0] !== VERSION) throw new InvariantError(`snapshot data: expected version ${VERSION} and a ${HEADER}-byte header`);
  const len = buf.readUInt32LE(1);
  if (len > buf.byteLength - HEADER) throw new InvariantError(`snapshot data: address table of ${len} bytes runs past the end (${buf.byteLength} bytes)`);
  const raw: unknown = JSON.parse(buf.subarray(HEADER, HEADER + len).toString('utf8'));
  if (typeof raw === 'object' && raw !== null) {
    for (const [k, v] of Object.entries(raw)) if (typeof v === 'string' && Number.isSafeInteger(Number(k))) addresses.set(Number(k), v);
  }
  return { addresses, app: data.subarray(HEADER + len) };
}
