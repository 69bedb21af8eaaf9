import { describe, expect, it } from "vitest";
import { HookOptionError, allowedHooksOf, formatHookList, parseAllowHook, parseAllowedHooks, splitHookList } from "./allowed-hooks.js";

describe("parseAllowHook", () => {
  it.each<[string, { name: string; argv: string[] }]>([
    ["reload=/usr/bin/systemctl reload nginx", { name: "reload", argv: ["/usr/bin/systemctl", "reload", "nginx"] }],
    ["flush=flush-cache", { name: "flush", argv: ["flush-cache"] }],
    // Whitespace splits, however much of it; an = after the first is part of the command.
    ["hup = /bin/kill  -HUP\t1234 ", { name: "hup", argv: ["/bin/kill", "-HUP", "1234"] }],
    ["mode=/usr/local/bin/app --mode=graceful", { name: "mode", argv: ["/usr/local/bin/app", "--mode=graceful"] }],
  ])("takes %j", (spec, parsed) => {
    expect(parseAllowHook(spec)).toEqual(parsed);
  });

  it.each<[string, string, RegExp]>([
    ["no =", "/usr/bin/reload", /give NAME=COMMAND, e\.g\. --allow-hook reload=/],
    ["a name against the name rule", "Reload=/bin/true", /the hook name "Reload" must be 1-40 characters of lower-case letters/],
    ["a name of 41 characters", `${"a".repeat(41)}=/bin/true`, /must be 1-40 characters/],
    ["an empty name", "=/bin/true", /the hook name "" must be/],
    ["no command", "reload=", /no command after reload=/],
    ["only whitespace", "reload=   ", /no command after reload=/],
    [
      "shell chaining",
      "reload=/bin/systemctl reload x && echo ok",
      /"&" in .*runs without a shell \(split on whitespace\).*put what needs a shell in a script/,
    ],
    ["a variable", "reload=/bin/echo $HOME", /"\$" in/],
    ["quotes", "reload=/bin/sh -c 'kill -HUP 1'", /"'" in/],
    ["a ;, which separates hooks in MESH_ALLOW_HOOKS", "reload=/bin/true;/bin/false", /";" in/],
    ["a relative path", "reload=./reload.sh", /relative path; give an absolute path, or a bare name found in \/usr\/local\/sbin:/],
  ])("refuses %s, saying what to do", (_, spec, message) => {
    expect(() => parseAllowHook(spec)).toThrow(HookOptionError);
    expect(() => parseAllowHook(spec)).toThrow(message);
  });

  it("takes a name of 40 characters, the name rule's limit", () => {
    expect(parseAllowHook(`${"a".repeat(40)}=/bin/true`).name).toHaveLength(40);
  });
});

describe("parseAllowedHooks, splitHookList, allowedHooksOf", () => {
  it("refuses a hook given twice", () => {
    expect(() => parseAllowedHooks(["reload=/bin/true", "reload=/bin/false"])).toThrow(/--allow-hook reload: given twice/);
  });

  it("reads MESH_ALLOW_HOOKS as ;-separated entries, and formats hooks back to the same", () => {
    const env = { MESH_ALLOW_HOOKS: " reload=/usr/bin/systemctl reload nginx ;; flush=/usr/local/bin/flush " };
    const hooks = allowedHooksOf(undefined, env);
    expect([...hooks]).toEqual([
      ["reload", ["/usr/bin/systemctl", "reload", "nginx"]],
      ["flush", ["/usr/local/bin/flush"]],
    ]);
    expect(parseAllowedHooks(splitHookList(formatHookList(hooks)))).toEqual(hooks);
    expect(splitHookList(undefined)).toEqual([]);
  });

  it("takes --allow-hook over MESH_ALLOW_HOOKS when any is given, as --node over MESH_NODE", () => {
    const env = { MESH_ALLOW_HOOKS: "flush=/bin/true" };
    expect([...allowedHooksOf(["reload=/bin/false"], env).keys()]).toEqual(["reload"]);
    expect([...allowedHooksOf([], env).keys()]).toEqual(["flush"]);
    expect(allowedHooksOf([], {}).size).toBe(0);
  });
});
