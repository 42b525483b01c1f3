import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { printTable, printable } from '../../src/cli/output.js';

describe('text for a terminal', () => {
  it('escapes every control character (C0, DEL, C1), the common ones as JSON does', () => {
    expect(printable('a\tb\nc\u001b[2J\u0007\u007f\u009bX\u0085 é ✓')).toBe('a\\tb\\nc\\u001b[2J\\u0007\\u007f\\u009bX\\u0085 é ✓');
    for (let code = 0; code < 0x100; code++) {
      const out = printable(String.fromCharCode(code));
      // eslint-disable-next-line no-control-regex
      expect(out, `U+${code.toString(16)}`).not.toMatch(/[\u0000-\u001f\u007f-\u009f]/);
    }
  });

  it('aligns a table on the escaped cells', () => {
    let text = '';
    const out = new Writable({
      write(chunk: Buffer, _encoding, done) {
        text += chunk.toString();
        done();
      },
    });
    printTable(out, [
      ['N', 'OWNER'],
      ['a\tb', 'x'],
      ['c', 'y'],
    ]);
    // Widths of what is printed (a\\tb is four characters), not of the raw cells.
    expect(text).toBe('N     OWNER\na\\tb  x\nc     y\n');
  });
});
