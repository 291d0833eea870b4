// Byte sizes as the collector's flags take them: "64MiB", "4GiB", "512KiB", or bare bytes.

const UNITS: Record<string, number> = { '': 1, b: 1, kib: 1024, mib: 1024 ** 2, gib: 1024 ** 3 };

export function parseSize(text: string): number {
  const m = /^(\d+(?:\.\d+)?)\s*([a-z]*)$/i.exec(text.trim());
  const unit = m ? UNITS[m[2]!.toLowerCase()] : undefined;
  if (!m || unit === undefined) throw new Error(`bad size "${text}": use e.g. 64MiB, 4GiB, 512KiB`);
  return Math.round(Number(m[1]) * unit);
}
