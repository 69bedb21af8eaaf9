import { describe, expect, it } from "vitest";
import type { Store } from "@mesh/shared/runtime";
import { withoutCredentials } from "./state.js";

describe("withoutCredentials", () => {
  it("hands on every bucket but mesh-credentials, which throws when reached for, saying why", () => {
    const kv = { grants: { name: "g" }, credentials: { name: "c" } } as unknown as Store["kv"];
    const store = withoutCredentials({ nc: {}, kv } as unknown as Store);
    expect(store.kv.grants).toBe(kv.grants);
    expect(() => store.kv.credentials).toThrow("meshctl console never reads mesh-credentials");
    expect(Object.keys(store.kv)).toEqual(["grants"]);
  });
});
