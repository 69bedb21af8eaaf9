/**
 * The two identities a grant alternates between, as PostgreSQL roles, MariaDB, RabbitMQ and
 * npm users, Redis ACL and registry password slots all do: generation k is held by slot `a`
 * when k is odd and `b` when it is even. Creating generation k+1 replaces only the other slot,
 * so k keeps working until it is retired, and retiring k late touches nothing of k+1 (k+2 takes
 * k's slot over, and a retire of k then finds a later generation there and leaves it alone).
 */

/** One of the two alternating identities of a grant. */
export type Slot = "a" | "b";

/** Both slots, `a` first. */
export const SLOTS: readonly Slot[] = ["a", "b"];

/** The slot of `generation`: `a` for odd, `b` for even. */
export function slotOf(generation: number): Slot {
  return generation % 2 === 1 ? "a" : "b";
}

/** The name of `generation`'s identity under `base`: `<base>_a` for odd generations, `<base>_b` for even ones. */
export function slotName(base: string, generation: number): string {
  return `${base}_${slotOf(generation)}`;
}
