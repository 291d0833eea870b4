// `make cross-arm64` builds the addon for arm64 guests from the same C sources.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const OUT = fileURLToPath(new URL('../native/build-arm64/vsockdiag.node', import.meta.url));
const CC = 'aarch64-linux-gnu-gcc';

function haveCompiler(): boolean {
  try {
    execFileSync(CC, ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

const have = haveCompiler();
if (!have) console.log(`vsock-cross test skipped: ${CC} not found (apt-get install gcc-aarch64-linux-gnu)`);

describe.skipIf(!have)('make cross-arm64', () => {
  it('produces an aarch64 ELF shared object', () => {
    execFileSync('make', ['--no-print-directory', 'cross-arm64'], { cwd: ROOT, stdio: 'pipe', timeout: 120_000 });
    const elf = readFileSync(OUT);
    expect(elf.subarray(0, 4)).toEqual(Buffer.from([0x7f, 0x45, 0x4c, 0x46])); // \x7fELF
    expect(elf[4]).toBe(2); // ELFCLASS64
    expect(elf[5]).toBe(1); // little endian
    expect(elf.readUInt16LE(16)).toBe(3); // ET_DYN
    expect(elf.readUInt16LE(18)).toBe(0xb7); // EM_AARCH64
  }, 130_000);
});
