// Small statistics helpers for the benchmarks.

export function percentile(values: number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank]!;
}

export function summarize(values: number[]): { n: number; p50: number; p99: number; max: number; mean: number } {
  const mean = values.reduce((a, b) => a + b, 0) / (values.length || 1);
  return { n: values.length, p50: percentile(values, 50), p99: percentile(values, 99), max: Math.max(...values), mean };
}
