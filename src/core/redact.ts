/**
 * Credentials out of URLs before they are shown: in the CLI's lines, in error messages, in the
 * demo. Works on the text as given (no URL parsing), so a malformed URL is redacted too.
 *
 * What is replaced by `***`:
 * - the password of the userinfo (`scheme://user:PASSWORD@host`); for `redis`, `rediss` and
 *   `redlock` URLs a userinfo without `:` too, since ioredis reads `redis://SECRET@host` as a
 *   password;
 * - the value of every query parameter whose name contains `pass`, `pwd`, `secret`, `token`,
 *   `auth`, `key`, `credential` or `signature` (`password`, `sslpassword`, `sslkey`, `auth_token`…).
 */

const MASK = '***';
/** Query parameters whose values are credentials (or name where credentials are). */
const SECRET_PARAM = /pass|pwd|secret|token|auth|key|credential|signature/i;
/** Schemes whose userinfo without a `:` is a password. */
const PASSWORD_ONLY_USERINFO = /^(redis|rediss|redlock)$/i;
/** A URL inside some text: a scheme, `://`, then anything up to white space or a quote. */
const URL_IN_TEXT = /[a-z][a-z0-9+.-]*:\/\/[^\s'"`<>]+/gi;
/** Literal secrets shorter than this are not searched for in free text (they would match too much). */
const MIN_LITERAL_SECRET = 4;

/** `url` with its credentials replaced by `***`; text that is not `scheme://…` is returned as is. */
export function redactUrl(url: string): string {
  const m = /^(\s*)([a-z][a-z0-9+.-]*):\/\/(.*)$/is.exec(url);
  if (!m) return url;
  const [, lead, scheme, rest] = m as unknown as [string, string, string, string];
  // The userinfo ends at the last '@' before the query or fragment (a password may hold an
  // unescaped '@' or '/').
  const end = searchEnd(rest);
  const at = rest.lastIndexOf('@', end - 1);
  let authorityAndPath = rest.slice(0, end);
  if (at >= 0) {
    const userinfo = rest.slice(0, at);
    const colon = userinfo.indexOf(':');
    const shown = colon >= 0 ? `${userinfo.slice(0, colon)}:${MASK}` : PASSWORD_ONLY_USERINFO.test(scheme) && userinfo !== '' ? MASK : userinfo;
    authorityAndPath = `${shown}${rest.slice(at, end)}`;
  }
  return `${lead}${scheme}://${authorityAndPath}${redactQuery(rest.slice(end))}`;
}

/**
 * `text` with every URL in it redacted (as redactUrl does), and every credential of `urls` that
 * appears literally (a driver may quote a password without its URL) replaced by `***`.
 */
export function redactSecrets(text: string, urls: readonly string[] = []): string {
  let out = text.replace(URL_IN_TEXT, (u) => {
    // Punctuation right after a URL ("… store redis://h:1: reason") belongs to the sentence.
    const trail = /[.,:;)\]]+$/.exec(u)?.[0] ?? '';
    return redactUrl(u.slice(0, u.length - trail.length)) + trail;
  });
  for (const secret of urls.flatMap(secretsOf)) {
    if (secret.length >= MIN_LITERAL_SECRET) out = out.split(secret).join(MASK);
  }
  return out;
}

/** The credentials in `url`: the userinfo password and secret query values, raw and decoded. */
function secretsOf(url: string): string[] {
  const m = /^\s*([a-z][a-z0-9+.-]*):\/\/(.*)$/is.exec(url);
  if (!m) return [];
  const scheme = m[1]!;
  const rest = m[2]!;
  const end = searchEnd(rest);
  const at = rest.lastIndexOf('@', end - 1);
  const found: string[] = [];
  if (at >= 0) {
    const userinfo = rest.slice(0, at);
    const colon = userinfo.indexOf(':');
    if (colon >= 0) found.push(userinfo.slice(colon + 1));
    else if (PASSWORD_ONLY_USERINFO.test(scheme)) found.push(userinfo);
  }
  const query = rest.slice(end);
  if (query.startsWith('?')) {
    for (const pair of query.slice(1).split('#')[0]!.split('&')) {
      const eq = pair.indexOf('=');
      if (eq > 0 && SECRET_PARAM.test(decodeLoosely(pair.slice(0, eq)))) found.push(pair.slice(eq + 1));
    }
  }
  return [...new Set(found.flatMap((s) => [s, decodeLoosely(s)]))].filter((s) => s !== '');
}

/** Where the query (`?`) or fragment (`#`) of `rest` starts, or its length. */
function searchEnd(rest: string): number {
  const q = rest.search(/[?#]/);
  return q < 0 ? rest.length : q;
}

/** `?a=1&password=x#f` -> `?a=1&password=***#f`. */
function redactQuery(tail: string): string {
  if (!tail.startsWith('?')) return tail;
  const hash = tail.indexOf('#');
  const query = hash < 0 ? tail.slice(1) : tail.slice(1, hash);
  const fragment = hash < 0 ? '' : tail.slice(hash);
  const pairs = query.split('&').map((pair) => {
    const eq = pair.indexOf('=');
    if (eq <= 0) return pair;
    return SECRET_PARAM.test(decodeLoosely(pair.slice(0, eq))) ? `${pair.slice(0, eq)}=${MASK}` : pair;
  });
  return `?${pairs.join('&')}${fragment}`;
}

function decodeLoosely(s: string): string {
  try {
    return decodeURIComponent(s.replace(/\+/g, ' '));
  } catch {
    return s;
  }
}
