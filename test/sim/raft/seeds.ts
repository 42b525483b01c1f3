/** Node count for a seed: the one asked for, or 3 for odd seeds and 5 for even ones. */
export function nodesFor(seed: number, nodes: number | undefined): number {
  return nodes ?? (seed % 2 === 1 ? 3 : 5);
}
