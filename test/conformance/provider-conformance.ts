/**
 * The contract of {@link ProviderAdapter}, as tests every adapter's test file registers against
 * its real backend (after Vault's dbplugin test helpers): idempotent create, an observe that
 * never mutates, a delete of what is gone that succeeds, a login that proves a credential and
 * classifies failures, and names refused before they reach the backend; and both ways of
 * taking a grant back (named by its kind: `name` is the kind): its data kept with every
 * generation locked, or dropped.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BINDING_KEYS, BINDING_KEY_PATTERN, DATA_KINDS, ErrorCodes, isMeshError, isValidName, type ErrorCode, type Kind } from "@mesh/shared";
import type { BindingValues, CreateResult, GrantRef, ProviderAdapter } from "@mesh/providers";

/** A name every adapter must refuse (InvalidName): in an SQL identifier it would break out and drop a role. */
export const INJECTION_NAME = 'x"; DROP ROLE postgres; --';

interface CommonConformanceOptions {
  /**
   * Whether the adapter keeps state in an external system (a role, a database). The built-in
   * `secret` adapter does not: its resource always exists and delete has nothing to undo, so
   * the checks of "missing before create / after delete" do not apply and a stateless check runs.
   */
  stateful: boolean;
  /** For adapters with an external system: the same kind on a provider nobody listens for. */
  unreachable?: {
    makeAdapter(): ProviderAdapter;
    /** The given, working bindings pointed at an address nobody listens on. */
    bindings(bindings: BindingValues): BindingValues;
  };
  /**
   * For an adapter whose create issues a signed document (`tls.certificate`: a new serial and
   * signature over the same key and names each time): what of a create's result must be the
   * same when it is repeated with the same secret. Absent: all of it.
   */
  sameOnRepeat?(result: CreateResult): unknown;
}

/** An adapter whose grants carry a credential, one per generation, with a rotation overlap (the default). */
export interface CredentialConformanceOptions extends CommonConformanceOptions {
  credential?: true;
  /** The given, working bindings made wrong in their secret part (a changed password). */
  wrongCredential(bindings: BindingValues): BindingValues;
}

/**
 * An adapter whose resource has no credential of its own, hence no overlap (`kv.bucket`,
 * `object.store`: a holder reaches them with its own identity). Instead of the generation,
 * overlap, retire and wrong-credential checks, the suite checks what holds then: generate()
 * makes nothing, every generation binds the same resource, and retire changes nothing.
 */
export interface CredentialFreeConformanceOptions extends CommonConformanceOptions {
  credential: false;
}

export type ConformanceOptions = CredentialConformanceOptions | CredentialFreeConformanceOptions;

/** A grant of its own for each test, so tests share no state. */
/**
 * Binding values `b` pointed at `port` instead: `port`, and the port of every server its `url`
 * or `uri` lists (a NATS binding's logins try every server listed there).
 */
export function atPort(b: Record<string, string>, port: number): Record<string, string> {
  const moved = (list: string) => list.replace(/:(\d+)(?=,|\/|$)/g, `:${port}`);
  return { ...b, port: String(port), ...(b.url ? { url: moved(b.url) } : {}), ...(b.uri ? { uri: moved(b.uri) } : {}) };
}

export function freshGrant(generation = 1): GrantRef {
  return { module: `conf-${randomBytes(4).toString("hex")}`, requirement: "res", generation };
}

/**
 * `a`, recording in `touched` (by `<module>/<requirement>`) every grant with valid names it is
 * asked to create, so a suite's clean-up deletes them even when a test failed half-way.
 */
export function recordingAdapter(a: ProviderAdapter, touched: Map<string, Omit<GrantRef, "generation">>): ProviderAdapter {
  return {
    kinds: a.kinds,
    generate: () => a.generate(),
    observe: (req) => a.observe(req),
    create: (req) => {
      if (isValidName(req.grant.module) && isValidName(req.grant.requirement)) touched.set(`${req.grant.module}/${req.grant.requirement}`, req.grant);
      return a.create(req);
    },
    delete: (req) => a.delete(req),
    login: (req) => a.login(req),
    retire: (req) => a.retire(req),
    close: () => a.close(),
  };
}

/** Awaits `p` and asserts it rejects with a MeshError of `code`; returns the error. */
export async function expectMeshError(p: Promise<unknown>, code: ErrorCode) {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e, `expected MeshError ${code}`).toBeDefined();
  expect(isMeshError(e, code), `expected MeshError ${code}, got ${String(e)}`).toBe(true);
  return e as Error;
}

/** Registers the conformance tests of an adapter, made by `makeAdapter` once per suite. */
export function describeProviderConformance(name: string, makeAdapter: () => ProviderAdapter | Promise<ProviderAdapter>, opts: ConformanceOptions): void {
  describe(`${name} conformance`, () => {
    let adapter: ProviderAdapter;
    beforeAll(async () => {
      adapter = await makeAdapter();
    });
    afterAll(async () => {
      await adapter?.close();
    });

    const create = (grant: GrantRef, secret = adapter.generate()) => adapter.create({ grant, secret });

    if (opts.credential !== false) {
      it("generates fresh secret material each time", () => {
        const a = adapter.generate();
        const b = adapter.generate();
        expect(Object.keys(a).length).toBeGreaterThan(0);
        for (const v of Object.values(a)) expect(v.length).toBeGreaterThanOrEqual(20);
        expect(a).not.toEqual(b);
      });
    } else {
      it("generates no secret material: the resource has no credential", () => {
        expect(adapter.generate()).toEqual({});
      });
    }

    it("binds only keys an agent can write as files and env names, and says what it made without a secret", async () => {
      const grant = freshGrant();
      const secret = adapter.generate();
      const { bindings, resource } = await create(grant, secret);
      for (const key of Object.keys(bindings)) expect(key, `binding key ${key}`).toMatch(BINDING_KEY_PATTERN);
      // What a requirement's env may name is what the kind binds.
      for (const key of Object.keys(bindings)) expect(BINDING_KEYS[name as Kind], `binding key ${key} of ${name}`).toContain(key);
      for (const v of Object.values(secret)) for (const r of Object.values(resource)) expect(r).not.toContain(v);
      expect(bindings.provider).toBeTruthy();
      expect(bindings.type).toBeTruthy();
      await adapter.delete({ grant });
    });

    it("create is idempotent: twice with the same secret gives the same result, which still logs in", async () => {
      const grant = freshGrant();
      const secret = adapter.generate();
      const first = await create(grant, secret);
      const second = await create(grant, secret);
      const same = opts.sameOnRepeat ?? ((r: CreateResult) => r);
      expect(same(second)).toEqual(same(first));
      expect(await adapter.login({ bindings: second.bindings })).toEqual({ ok: true });
      expect((await adapter.observe({ grant })).exists).toBe(true);
      await adapter.delete({ grant });
    });

    if (opts.credential !== false) {
      const { wrongCredential } = opts;
      it("the created credential logs in, and a wrong one is rejected", async () => {
        const grant = freshGrant();
        const { bindings } = await create(grant);
        expect(await adapter.login({ bindings })).toEqual({ ok: true });
        const wrong = await adapter.login({ bindings: wrongCredential(bindings) });
        expect(wrong).toMatchObject({ ok: false, reason: "rejected" });
        await adapter.delete({ grant });
      });

      it("creating generation 2 keeps generation 1 logging in (the overlap a rotation needs)", async () => {
        const grant = freshGrant(1);
        const g1 = await create(grant);
        const g2 = await create({ ...grant, generation: 2 });
        expect(await adapter.login({ bindings: g1.bindings })).toEqual({ ok: true });
        expect(await adapter.login({ bindings: g2.bindings })).toEqual({ ok: true });
        await adapter.delete({ grant });
      });

      it("a staged generation and the current one both log in; after retire only the new one does", async () => {
        const grant = freshGrant(1);
        const g1 = await create(grant);
        const g2 = await create({ ...grant, generation: 2 });
        expect(await adapter.login({ bindings: g1.bindings })).toEqual({ ok: true });
        expect(await adapter.login({ bindings: g2.bindings })).toEqual({ ok: true });
        await adapter.retire({ grant: { ...grant, generation: 1 } });
        await adapter.retire({ grant: { ...grant, generation: 1 } }); // idempotent
        expect(await adapter.login({ bindings: g2.bindings })).toEqual({ ok: true });
        if (opts.stateful) expect(await adapter.login({ bindings: g1.bindings })).toMatchObject({ ok: false, reason: "rejected" });
        // Staging generation 3 brings the retired role back with the new secret.
        const g3 = await create({ ...grant, generation: 3 });
        expect(await adapter.login({ bindings: g3.bindings })).toEqual({ ok: true });
        expect(await adapter.login({ bindings: g2.bindings })).toEqual({ ok: true });
        // A late retire of generation 1 (a rotator acting on a stale record) must not end
        // generation 3, which the same alternating user or role serves now.
        await adapter.retire({ grant: { ...grant, generation: 1 } });
        expect(await adapter.login({ bindings: g3.bindings })).toEqual({ ok: true });
        await adapter.delete({ grant });
      });
    } else {
      it("every generation binds the same resource: generation 2 gets what generation 1 got, and both work", async () => {
        const grant = freshGrant(1);
        const g1 = await create(grant);
        const g2 = await create({ ...grant, generation: 2 });
        expect(g2).toEqual(g1);
        expect(await adapter.login({ bindings: g1.bindings })).toEqual({ ok: true });
        await adapter.delete({ grant });
      });

      it("retire changes nothing, is idempotent, and refuses bad names and generations", async () => {
        const grant = freshGrant(1);
        const g1 = await create(grant);
        await adapter.retire({ grant });
        await adapter.retire({ grant }); // idempotent
        expect(await adapter.login({ bindings: g1.bindings })).toEqual({ ok: true });
        expect((await adapter.observe({ grant })).exists).toBe(true);
        expect(await create({ ...grant, generation: 3 })).toEqual(g1);
        await expectMeshError(adapter.retire({ grant: { ...grant, module: INJECTION_NAME } }), ErrorCodes.InvalidName);
        await expectMeshError(adapter.retire({ grant: { ...grant, generation: 0 } }), ErrorCodes.InvalidRequest);
        await adapter.delete({ grant });
      });
    }

    // The kinds that hold data are the ones whose data is kept (Retain) when nothing needs them; the others are always deleted.
    if (opts.credential !== false && opts.stateful && DATA_KINDS.includes(name as Kind)) {
      it("taking back, data kept (Retain): retiring every generation locks each of them, the resource stays, and a later generation logs in on it", async () => {
        const grant = freshGrant(1);
        const g1 = await create(grant);
        const g2 = await create({ ...grant, generation: 2 });
        for (const generation of [1, 2]) await adapter.retire({ grant: { ...grant, generation } });
        expect(await adapter.login({ bindings: g1.bindings })).toMatchObject({ ok: false, reason: "rejected" });
        expect(await adapter.login({ bindings: g2.bindings })).toMatchObject({ ok: false, reason: "rejected" });
        expect((await adapter.observe({ grant: { ...grant, generation: 2 } })).exists).toBe(true);
        const g3 = await create({ ...grant, generation: 3 });
        expect(await adapter.login({ bindings: g3.bindings })).toEqual({ ok: true });
        await adapter.delete({ grant });
      });
    }

    it("taking back, dropped (Delete): no generation logs in any more, and the resource is missing", async () => {
      const grant = freshGrant(1);
      const g1 = await create(grant);
      const g2 = await create({ ...grant, generation: 2 });
      await adapter.delete({ grant });
      if (opts.stateful) {
        for (const g of [g1, g2]) expect((await adapter.login({ bindings: g.bindings })).ok).toBe(false);
        expect((await adapter.observe({ grant: { ...grant, generation: 2 } })).exists).toBe(false);
      }
      // Declared again later, the grant starts afresh at generation 1, and that works.
      const again = await create(grant);
      expect(await adapter.login({ bindings: again.bindings })).toEqual({ ok: true });
      // The old generations stay dead (a kind without a credential of its own binds the same resource again).
      if (opts.stateful && opts.credential !== false) for (const g of [g1, g2]) expect((await adapter.login({ bindings: g.bindings })).ok).toBe(false);
      await adapter.delete({ grant });
    });

    it("delete of what never existed succeeds, and so does deleting twice", async () => {
      const grant = freshGrant();
      await adapter.delete({ grant });
      await create(grant);
      await adapter.delete({ grant });
      await adapter.delete({ grant });
    });

    it("refuses the injection name, and a bad generation, in every verb", async () => {
      const secret = adapter.generate();
      for (const grant of [
        { module: INJECTION_NAME, requirement: "res", generation: 1 },
        { module: "conf", requirement: INJECTION_NAME, generation: 1 },
      ]) {
        await expectMeshError(adapter.create({ grant, secret }), ErrorCodes.InvalidName);
        await expectMeshError(adapter.observe({ grant }), ErrorCodes.InvalidName);
        await expectMeshError(adapter.delete({ grant }), ErrorCodes.InvalidName);
      }
      await expectMeshError(adapter.create({ grant: freshGrant(0), secret }), ErrorCodes.InvalidRequest);
    });

    if (opts.stateful) {
      it("observe never mutates: missing before create, and still missing after observing", async () => {
        const grant = freshGrant();
        expect((await adapter.observe({ grant })).exists).toBe(false);
        expect((await adapter.observe({ grant })).exists).toBe(false);
        const { resource } = await create(grant);
        const seen = await adapter.observe({ grant });
        expect(seen.exists).toBe(true);
        for (const v of Object.values(resource)) expect(Object.values(seen.details)).toContain(v);
        // Generation 2 was never created; observing it must not create it either. Without a
        // credential the resource is the same for every generation, so it exists for 2 as well.
        const g2 = { ...grant, generation: 2 };
        const g2Exists = opts.credential === false;
        expect((await adapter.observe({ grant: g2 })).exists).toBe(g2Exists);
        expect((await adapter.observe({ grant: g2 })).exists).toBe(g2Exists);
        await adapter.delete({ grant });
      });

      if (opts.credential !== false) {
        it("create with a new secret for the same generation converges: the new one logs in, the old one is rejected", async () => {
          const grant = freshGrant();
          const before = await create(grant);
          const after = await create(grant);
          expect(after.resource).toEqual(before.resource);
          expect(await adapter.login({ bindings: after.bindings })).toEqual({ ok: true });
          expect(await adapter.login({ bindings: before.bindings })).toMatchObject({ ok: false, reason: "rejected" });
          await adapter.delete({ grant });
        });
      }

      it("after delete, the credential no longer logs in and observe says the resource does not exist", async () => {
        const grant = freshGrant();
        const { bindings } = await create(grant);
        await adapter.delete({ grant });
        const result = await adapter.login({ bindings });
        expect(result.ok).toBe(false);
        expect(["missing", "rejected"]).toContain(!result.ok && result.reason);
        expect((await adapter.observe({ grant })).exists).toBe(false);
      });
    } else {
      it("is stateless: the resource always exists and delete leaves a credential working", async () => {
        const grant = freshGrant();
        expect((await adapter.observe({ grant })).exists).toBe(true);
        const { bindings } = await create(grant);
        await adapter.delete({ grant });
        expect((await adapter.observe({ grant })).exists).toBe(true);
        expect(await adapter.login({ bindings })).toEqual({ ok: true });
      });
    }

    const unreachable = opts.unreachable;
    if (unreachable) {
      describe("an unreachable provider", () => {
        let dead: ProviderAdapter;
        beforeAll(() => {
          dead = unreachable.makeAdapter();
        });
        afterAll(async () => {
          await dead?.close();
        });

        it("login says unreachable", async () => {
          const grant = freshGrant();
          const { bindings } = await create(grant);
          const result = await adapter.login({ bindings: unreachable.bindings(bindings) });
          expect(result).toMatchObject({ ok: false, reason: "unreachable" });
          await adapter.delete({ grant });
        });

        it("create, observe and delete fail as ProviderUnreachable, retryable, naming the endpoint", async () => {
          const grant = freshGrant();
          const secret = dead.generate();
          // One at a time: calls made at once could reject out of order, unhandled.
          for (const call of [() => dead.create({ grant, secret }), () => dead.observe({ grant }), () => dead.delete({ grant })]) {
            const e = await expectMeshError(call(), ErrorCodes.ProviderUnreachable);
            expect(isMeshError(e) && e.retryable).toBe(true);
            expect(e.message).toMatch(/unreachable.*check/);
            for (const v of Object.values(secret)) expect(e.message).not.toContain(v);
          }
        });

        it("names are refused before any connection is tried", async () => {
          const grant = { module: INJECTION_NAME, requirement: "res", generation: 1 };
          await expectMeshError(dead.create({ grant, secret: dead.generate() }), ErrorCodes.InvalidName);
          await expectMeshError(dead.observe({ grant }), ErrorCodes.InvalidName);
          await expectMeshError(dead.delete({ grant }), ErrorCodes.InvalidName);
        });
      });
    }
  });
}

/**
 * A server of the test's own, for the admin verbs: an admin user made there with `password`, and
 * an adapter of that server whose admin it is (its document's own password is not used by them).
 */
export interface AdminVerbsFixture {
  /** Makes admin user `user` with `password` at the server; returns an adapter naming it, and how to remove the user. */
  admin(user: string, password: string): Promise<{ adapter: ProviderAdapter; remove(): Promise<void> }>;
  /** Restarts the server keeping its data, to show a set password outlives a restart. */
  restart?(): Promise<void>;
  /** An adapter of the same kind whose admin is `user` at an address nobody listens on. */
  unreachable(user: string): ProviderAdapter;
}

/**
 * Registers the checks of the admin verbs (`loginAdmin`, `setAdminPassword`) the frozen-password
 * engine relies on, against a server the test owns: a right password from a wrong one; setting
 * the next with the current one, then again (a no-op); neither working, said without a password;
 * a server that does not answer; and, given `restart`, the new password kept across it.
 */
export function describeAdminVerbs(name: string, fixture: () => AdminVerbsFixture): void {
  describe(`${name} admin verbs`, () => {
    const pw = (n: number) => `generation-${n}-${randomBytes(6).toString("hex")}`;

    it("loginAdmin tells the admin's password from a wrong one; setAdminPassword sets it with the old one, and again is a no-op", async () => {
      const [p1, p2, p3] = [pw(1), pw(2), pw(3)];
      const user = `admin_check_${randomBytes(3).toString("hex")}`;
      const { adapter, remove } = await fixture().admin(user, p1);
      try {
        expect(adapter.loginAdmin && adapter.setAdminPassword, "the adapter has both admin verbs").toBeTruthy();
        expect(await adapter.loginAdmin!({ password: p1 })).toEqual({ ok: true });
        const wrong = await adapter.loginAdmin!({ password: p2 });
        expect(wrong).toMatchObject({ ok: false, reason: "rejected" });
        expect(JSON.stringify(wrong)).not.toContain(p2);
        await adapter.setAdminPassword!({ current: p1, next: p2 });
        expect(await adapter.loginAdmin!({ password: p2 })).toEqual({ ok: true });
        expect(await adapter.loginAdmin!({ password: p1 })).toMatchObject({ ok: false, reason: "rejected" });
        // Done already (another instance, or a run that died after it): succeeds without change.
        await adapter.setAdminPassword!({ current: p1, next: p2 });
        expect(await adapter.loginAdmin!({ password: p2 })).toEqual({ ok: true });
        // Neither works: an error naming the user, never a password.
        const e = await expectMeshError(adapter.setAdminPassword!({ current: p3, next: p1 }), ErrorCodes.ProviderMisconfigured);
        expect(e.message).toContain(user);
        for (const p of [p1, p2, p3]) expect(e.message).not.toContain(p);
        const restart = fixture().restart;
        if (restart) {
          await restart();
          expect(await adapter.loginAdmin!({ password: p2 }), "the password set is kept across a restart").toEqual({ ok: true });
          expect(await adapter.loginAdmin!({ password: p1 })).toMatchObject({ ok: false, reason: "rejected" });
        }
      } finally {
        await adapter.close();
        await remove();
      }
    });

    it("a server that does not answer: loginAdmin says unreachable, setAdminPassword fails as ProviderUnreachable, retryable", async () => {
      const dead = fixture().unreachable("admin_check");
      try {
        expect(await dead.loginAdmin!({ password: "whatever" })).toMatchObject({ ok: false, reason: "unreachable" });
        const e = await expectMeshError(dead.setAdminPassword!({ current: "a-password", next: "b-password" }), ErrorCodes.ProviderUnreachable);
        expect(isMeshError(e) && e.retryable).toBe(true);
        expect(e.message).not.toMatch(/[ab]-password/);
      } finally {
        await dead.close();
      }
    });
  });
}
