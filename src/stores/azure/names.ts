/**
 * Blob names and lease ids of the Azure Blob store. Lease, journal and stream names are hashed
 * (SHA-256, hex) because a tenure name (200 characters of any Unicode) does not always fit a blob
 * name's rules; the name itself travels in metadata (base64url, as metadata is ASCII).
 */
import { createHash } from 'node:crypto';

function hash(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

export const blobNames = {
  /** The lease blob of `name`: its blob lease is the lease; its metadata holds the term. */
  lease: (name: string): string => `leases/${hash(name)}`,
  leasesPrefix: 'leases/',
  /** The append blob holding every entry written under lease `lease` (its fence is the last term in it). */
  journal: (lease: string): string => `journals/${hash(lease)}`,
  /** The claim of `stream` by the lease of its first entry. */
  stream: (stream: string): string => `streams/${hash(stream)}`,
  streamsPrefix: 'streams/',
};

/**
 * The blob lease id of `owner` holding `name` with `term`, a GUID as Azure wants it. Derived, not
 * random, so that the id is the compare-and-set on owner and term (safety rule 6): only a caller
 * naming the same owner and term can renew or release, from any process, and a new term is a new
 * id. It is not a secret (anyone with the account key can break a lease anyway).
 */
export function leaseIdOf(name: string, owner: string, term: number): string {
  const h = hash(`tenure-lease\u0000${name}\u0000${owner}\u0000${term}`);
  const variant = ((parseInt(h[16]!, 16) & 0x3) | 0x8).toString(16);
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-${variant}${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

export function toB64(text: string): string {
  return Buffer.from(text, 'utf8').toString('base64url');
}

/** The text of a base64url metadata value, or null when it is not one. */
export function fromB64(value: string | undefined): string | null {
  if (value === undefined || !/^[A-Za-z0-9_-]*$/.test(value)) return null;
  return Buffer.from(value, 'base64url').toString('utf8');
}
