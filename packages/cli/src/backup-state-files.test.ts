import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { collectStateFiles, putBackStateFiles, stateDirsOf } from "./backup-state-files.js";

const dirs: string[] = [];
const newDir = () => {
  const d = mkdtempSync(join(tmpdir(), "mesh-state-files-"));
  dirs.push(d);
  return d;
};
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A state directory as meshctl up leaves it: the operator's files, its server's, the authority's, logs. */
function meshState(): string {
  const state = newDir();
  const put = (path: string, text: string) => {
    mkdirSync(join(state, path, ".."), { recursive: true });
    writeFileSync(join(state, path), text);
  };
  put("master.key", "ab".repeat(32));
  put("nats-operator/operator.json", "{operator}");
  put("nats-operator/signing-keys.json", "{sealed signing}");
  put("nats-operator/identity-keys.json", "{sealed identity}");
  put("nats-operator/admin.creds", "creds");
  put("nats-operator/resolver/ACCOUNT.jwt", "account jwt with revocations");
  put("nats-operator/server.conf", "config");
  put("nats-operator/store/jetstream/x", "store");
  put("nats-operator/tls/current/tls.key", "server key");
  put("mesh-ca/ca.crt", "bundle");
  put("mesh-ca/ca-key.json", "{sealed ca key}");
  put("logs/resolver.log", "log");
  return state;
}

describe("the state files a backup carries", () => {
  it("are the operator's keys and JWTs, the resolver's accounts and the authority's files; not the server's configuration, certificates, store, logs or the master key", () => {
    const files = collectStateFiles(stateDirsOf(meshState()));
    expect(files.map((f) => f.path).sort()).toEqual([
      "mesh-ca/ca-key.json",
      "mesh-ca/ca.crt",
      "nats-operator/admin.creds",
      "nats-operator/identity-keys.json",
      "nats-operator/operator.json",
      "nats-operator/resolver/ACCOUNT.jwt",
      "nats-operator/signing-keys.json",
    ]);
    expect(collectStateFiles(stateDirsOf(join(newDir(), "none")))).toEqual([]);
  });

  it("go back into an empty directory as they were, closed to others", () => {
    const files = collectStateFiles(stateDirsOf(meshState()));
    const target = join(newDir(), ".mesh");
    expect(putBackStateFiles(stateDirsOf(target), files)).toHaveLength(files.length);
    for (const f of files) {
      expect(readFileSync(join(target, f.path))).toEqual(f.data);
      expect(statSync(join(target, f.path)).mode & 0o777).toBe(0o600);
    }
    expect(statSync(join(target, "nats-operator/resolver")).mode & 0o777).toBe(0o700);
    // Again over themselves: nothing to write, nothing refused.
    expect(putBackStateFiles(stateDirsOf(target), files)).toEqual([]);
  });

  it("are refused, with nothing written, over another operator; a resolver's newer account in place is kept", () => {
    const files = collectStateFiles(stateDirsOf(meshState()));
    const other = meshState();
    rmSync(join(other, "mesh-ca"), { recursive: true });
    writeFileSync(join(other, "nats-operator/signing-keys.json"), "{another operator's}");
    expect(() => putBackStateFiles(stateDirsOf(other), files)).toThrow(
      /nats-operator\/signing-keys\.json differs from the backup's: this machine holds another mesh's operator/,
    );
    expect(existsSync(join(other, "mesh-ca/ca.crt"))).toBe(false);

    const same = meshState();
    writeFileSync(join(same, "nats-operator/resolver/ACCOUNT.jwt"), "newer account jwt");
    rmSync(join(same, "mesh-ca/ca.crt"));
    expect(putBackStateFiles(stateDirsOf(same), files)).toEqual([join(same, "mesh-ca/ca.crt")]);
    expect(readFileSync(join(same, "nats-operator/resolver/ACCOUNT.jwt"), "utf8")).toBe("newer account jwt");
  });

  it("are read from and written to directories placed apart, as a host set up by hand has them", () => {
    const from = meshState();
    const files = collectStateFiles(
      stateDirsOf(join(newDir(), "no-state"), {
        operator: join(from, "nats-operator"),
        resolver: join(from, "nats-operator/resolver"),
        ca: join(from, "mesh-ca"),
      }),
    );
    expect(files).toEqual(collectStateFiles(stateDirsOf(from)));
    const host = newDir();
    const dirs = { operator: join(host, "etc/nats-operator"), resolver: join(host, "var/resolver"), ca: join(host, "etc/mesh-ca") };
    putBackStateFiles(stateDirsOf(join(host, ".mesh"), dirs), files);
    expect(readFileSync(join(host, "var/resolver/ACCOUNT.jwt"), "utf8")).toBe("account jwt with revocations");
    expect(readFileSync(join(host, "etc/nats-operator/admin.creds"), "utf8")).toBe("creds");
    expect(existsSync(join(host, ".mesh"))).toBe(false);
  });

  it("may not name a file outside them: a changed backup writes nowhere else", () => {
    const target = newDir();
    for (const path of ["../escaped", "nats-operator/resolver/../../../escaped", "nats-operator/resolver/.hidden", "nats-operator/server.conf", "/etc/x"])
      expect(() => putBackStateFiles(stateDirsOf(target), [{ path, data: Buffer.from("x") }]), path).toThrow(/holds a file meshctl does not restore/);
  });
});
