/**
 * The client side of HTTP fencing against a real node:http server: fencedFetch never sends an
 * unfenced request, the header round-trips any group name, and only a fenced server's 409 naming
 * a higher term is a refusal.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError, NoTokenError, StaleTermError } from '../../src/core/index.js';
import { FENCING_HEADER_MAX, fencedFetch, fencingHeaders, formatFencingHeader, parseFencingHeader, runFenced } from '../../src/fencing/index.js';

/** A server that records the Fencing-Token values it got and answers what the path asks. */
let server: http.Server;
let url = '';
const received: (string | undefined)[][] = [];
beforeAll(async () => {
  server = http.createServer((req, res) => {
    const values: (string | undefined)[] = [];
    for (let i = 0; i < req.rawHeaders.length; i += 2) if (req.rawHeaders[i]!.toLowerCase() === 'fencing-token') values.push(req.rawHeaders[i + 1]);
    received.push(values);
    if (req.url === '/app-conflict') {
      res.statusCode = 409;
      res.setHeader('content-type', 'application/problem+json');
      return void res.end(JSON.stringify({ type: 'urn:app:duplicate', title: 'Duplicate order', status: 409 }));
    }
    if (req.url === '/other-group') {
      res.statusCode = 409;
      res.setHeader('content-type', 'application/problem+json');
      return void res.end(JSON.stringify({ status: 409, group: 'someone-else', termReceived: 5, highestAccepted: 9 }));
    }
    if (req.url === '/stale') {
      res.statusCode = 409;
      res.setHeader('content-type', 'application/problem+json; charset=utf-8');
      return void res.end(JSON.stringify({ status: 409, group: 'orders', termReceived: 5, highestAccepted: 9 }));
    }
    res.end('ok');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

const token = { lease: 'orders', term: 5 };

describe('fencedFetch', () => {
  it('outside a leadership, after it ended, or for another group: NoTokenError and nothing is sent', async () => {
    const before = received.length;
    await expect(fencedFetch(`${url}/x`)).rejects.toBeInstanceOf(NoTokenError);
    const ended = new AbortController();
    ended.abort();
    await expect(runFenced({ token, signal: ended.signal }, () => fencedFetch(`${url}/x`))).rejects.toBeInstanceOf(NoTokenError);
    await expect(runFenced({ token }, () => fencedFetch(`${url}/x`, { group: 'billing' }))).rejects.toBeInstanceOf(NoTokenError);
    expect(() => fencingHeaders()).toThrow(NoTokenError);
    expect(received.length).toBe(before);
  });

  it('sends the context token once; a hand-set header is refused before sending', async () => {
    const res = await runFenced({ token }, () => fencedFetch(`${url}/x`, { method: 'POST', body: 'x' }));
    expect(await res.text()).toBe('ok');
    expect(received.at(-1)).toEqual(['orders#5']);
    const before = received.length;
    await expect(runFenced({ token }, () => fencedFetch(`${url}/x`, { headers: { 'fencing-token': 'orders#99' } }))).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(runFenced({ token }, () => fencedFetch(new Request(`${url}/x`, { headers: { 'Fencing-Token': 'orders#99' } })))).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(received.length).toBe(before);
    // A Request's own headers are kept.
    await runFenced({ token }, () => fencedFetch(new Request(`${url}/x`, { headers: { 'x-trace': '1' } })));
    expect(received.at(-1)).toEqual(['orders#5']);
    expect(runFenced({ token }, () => fencingHeaders('orders'))).toEqual({ 'Fencing-Token': 'orders#5' });
  });

  it("a 409 naming this group and a higher term throws StaleTermError; the application's own 409s are returned", async () => {
    const stale = await runFenced({ token }, () => fencedFetch(`${url}/stale`)).catch((e: unknown) => e);
    expect(stale).toBeInstanceOf(StaleTermError);
    expect(stale).toMatchObject({ lease: 'orders', term: 5, currentTerm: 9 });
    const app = await runFenced({ token }, () => fencedFetch(`${url}/app-conflict`));
    expect(app.status).toBe(409);
    expect(await app.json()).toMatchObject({ type: 'urn:app:duplicate' });
    expect((await runFenced({ token }, () => fencedFetch(`${url}/other-group`))).status).toBe(409);
  });
});

describe('the Fencing-Token header', () => {
  it('round-trips any group name: spaces, %, #, non-ASCII, astral characters', () => {
    for (const lease of ['orders', ' padded ', '100%', 'a#b', 'café', 'grüße/日本', '𝄞 clef', 'x'.repeat(200), '😀'.repeat(100)]) {
      const text = formatFencingHeader({ lease, term: 7 });
      expect(text).toMatch(/^[\x21-\x7e]+$/);
      expect(text.length).toBeLessThanOrEqual(FENCING_HEADER_MAX);
      expect(parseFencingHeader([text])).toEqual({ kind: 'token', token: { lease, term: 7 } });
    }
    expect(formatFencingHeader({ lease: 'orders', term: Number.MAX_SAFE_INTEGER })).toBe('orders#9007199254740991');
  });

  it('is strict', () => {
    expect(parseFencingHeader([])).toEqual({ kind: 'missing' });
    for (const bad of ['', 'orders', 'orders#', '#5', 'orders#+5', 'orders# 5', 'orders#0x5', 'orders#1e3', 'orders#5#', 'ord%ZZers#5', 'a%00b#5', '%20#']) {
      expect(parseFencingHeader([bad]).kind, bad).toBe('malformed');
    }
    // Surrounding whitespace is HTTP's (node trims it already), not the value's.
    expect(parseFencingHeader([' orders#5 '])).toEqual({ kind: 'token', token: { lease: 'orders', term: 5 } });
    expect(parseFencingHeader(['orders#5', 'orders#5']).kind).toBe('malformed');
  });
});
