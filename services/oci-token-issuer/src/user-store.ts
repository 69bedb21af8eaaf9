/**
 * The issuer's users: one per `oci.registry` grant, with up to two password hashes, one per
 * alternating slot (`a` odd generations, `b` even), so generation k+1 logs in beside k during a
 * rotation. Kept in memory and written through to `users.json` in the state directory (mode
 * 0600, replaced atomically), so a restart keeps them. One issuer process owns the file: every
 * change is synchronous, so two requests never interleave inside one.
 */
import { existsSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { slotOf, type Slot } from "@mesh/providers";

export interface UserRecord {
  /** The grant, `<module>/<requirement>`. */
  mark: string;
  namespace: string;
  passwords: Partial<Record<Slot, { generation: number; hash: string }>>;
}

/** What a change did: `conflict` when the user exists for another grant (nothing changed). */
export type ChangeResult = "changed" | "unchanged" | "conflict";

export class UserStore {
  private readonly users: Map<string, UserRecord>;
  private readonly file: string;

  constructor(stateDir: string) {
    this.file = join(stateDir, "users.json");
    const saved = existsSync(this.file) ? (JSON.parse(readFileSync(this.file, "utf8")) as Record<string, UserRecord>) : {};
    this.users = new Map(Object.entries(saved));
  }

  get(user: string): UserRecord | undefined {
    return this.users.get(user);
  }

  /** Sets generation `generation`'s hash in its slot; the other slot is untouched. */
  setGeneration(user: string, mark: string, namespace: string, generation: number, hash: string): ChangeResult {
    const record = this.users.get(user);
    if (record && record.mark !== mark) return "conflict";
    const next: UserRecord = { mark, namespace, passwords: { ...record?.passwords, [slotOf(generation)]: { generation, hash } } };
    this.users.set(user, next);
    this.save();
    return "changed";
  }

  /** Removes generation `generation`'s hash, if its slot still holds that generation (not a later one that took the slot). */
  retireGeneration(user: string, mark: string, generation: number): ChangeResult {
    const record = this.users.get(user);
    const slot = slotOf(generation);
    if (!record || record.mark !== mark || record.passwords[slot]?.generation !== generation) return "unchanged";
    const passwords = { ...record.passwords };
    delete passwords[slot];
    this.users.set(user, { ...record, passwords });
    this.save();
    return "changed";
  }

  /** Deletes the user if it is `mark`'s. */
  delete(user: string, mark: string): ChangeResult {
    if (this.users.get(user)?.mark !== mark) return "unchanged";
    this.users.delete(user);
    this.save();
    return "changed";
  }

  private save(): void {
    const tmp = `${this.file}.tmp`;
    writeFileSync(tmp, JSON.stringify(Object.fromEntries(this.users)), { mode: 0o600 });
    renameSync(tmp, this.file);
  }
}
