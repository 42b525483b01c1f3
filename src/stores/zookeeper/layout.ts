/**
 * Where the ZooKeeper store keeps things, under the URL's chroot (`zk://h:p/CHROOT`):
 *
 * - `CHROOT/leases/<name>/_c_<uuid>-latch-<seq>`: candidates of lease `<name>`, ephemeral and
 *   sequential, the lowest sequence holds. This is Apache Curator's LeaderLatch layout (a
 *   protected node `_c_<uuid>-latch-` under the latch path), so a Curator LeaderLatch (or an
 *   InterProcessMutex, whose `-lock-` nodes sort the same way) started on `CHROOT/leases/<name>`
 *   agrees with tenure about who leads: the lowest sequence number, whoever made it.
 * - `CHROOT/terms/<name>`: the term counter (decimal text), bumped with a versioned set in the same
 *   multi that creates the holder's node.
 * - `CHROOT/fences/<name>`: the highest term accepted by a fenced append under lease `<name>`.
 * - `CHROOT/streams/<stream>`: a stream's head (`{"lease":…,"head":n}`), with its entries as
 *   children `e<seq, 12 digits>`; the entry's creation time (ZooKeeper's `ctime`) is its append time.
 *
 * Names are percent-encoded into one path component (`/`, `%` and leading dots escaped), so any
 * tenure name is one znode and `list(prefix)` is one getChildren.
 */

/** One path component for a tenure name: reversible, never `.`/`..`, never containing `/`. */
export function encodeName(name: string): string {
  // encodeURIComponent keeps letters, digits and -_.!~*'() and escapes everything else as UTF-8.
  return encodeURIComponent(name).replace(/^\./, '%2E').replace(/\*/g, '%2A');
}

export function decodeName(component: string): string | null {
  try {
    return decodeURIComponent(component);
  } catch {
    return null;
  }
}

const SEQ = /-(\d{10})$/;

/** The sequence number ZooKeeper appended to a sequential node's name, or null. */
export function sequenceOf(child: string): number | null {
  const m = SEQ.exec(child);
  return m ? Number(m[1]) : null;
}

/** Candidates (children with a sequence suffix), lowest sequence first. */
export function sortCandidates(children: readonly string[]): string[] {
  return children
    .filter((c) => sequenceOf(c) !== null)
    .sort((a, b) => sequenceOf(a)! - sequenceOf(b)!);
}

export const ENTRY_DIGITS = 12;

export function entryNode(seq: number): string {
  return `e${String(seq).padStart(ENTRY_DIGITS, '0')}`;
}

export class Layout {
  constructor(readonly root: string) {}
  leases(): string {
    return `${this.root}/leases`;
  }
  lease(name: string): string {
    return `${this.root}/leases/${encodeName(name)}`;
  }
  term(name: string): string {
    return `${this.root}/terms/${encodeName(name)}`;
  }
  fence(name: string): string {
    return `${this.root}/fences/${encodeName(name)}`;
  }
  stream(stream: string): string {
    return `${this.root}/streams/${encodeName(stream)}`;
  }
  entry(stream: string, seq: number): string {
    return `${this.stream(stream)}/${entryNode(seq)}`;
  }
}
