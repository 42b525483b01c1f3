/**
 * What a store folder tells the registry (`stores/registry.ts`): the URL schemes it serves, how to
 * read its URL into options, and how to open it. The opener loads the store (and so its driver) by
 * dynamic import, so a program pays only for the store it uses.
 */
import type { Store } from '../core/index.js';

/** A store URL split at its scheme, as `parseStoreUrl` hands it to a backend. */
export interface StoreUrl {
  /** The URL as given (for messages). */
  readonly given: string;
  /** The URL with surrounding white space removed. */
  readonly url: string;
  /** The scheme in lower case, without the colon: `sqlite`, `etcds`, ... */
  readonly scheme: string;
  /** Everything after `SCHEME:`. */
  readonly rest: string;
}

export interface StoreBackend<O extends { readonly kind: string }> {
  /** `StoreOptions.kind` of this store. */
  readonly kind: O['kind'];
  /** The URL schemes it serves, lower case, without the colon. */
  readonly schemes: readonly string[];
  /** How its URLs are shown in "available: ..." lists, such as `sqlite:PATH` or `etcd://`. */
  readonly shown: readonly string[];
  /** Read a URL of one of `schemes` into options; throws InvalidArgumentError (field `store`). */
  parse(url: StoreUrl): O;
  /** Open the store; its module (and driver) is loaded here, on first use. */
  open(options: O): Promise<Store>;
}
