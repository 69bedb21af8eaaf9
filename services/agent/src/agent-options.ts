/**
 * Options of {@link startAgent}.
 */
import type { Store } from "@mesh/shared/runtime";
import type { Logger } from "@mesh/shared/service";
import type { AllowedHooks } from "@mesh/shared";

export interface AgentOptions {
  /** The opened store (KV buckets and streams). The agent does not close its connection. */
  store: Store;
  /** This node's name; the agent delivers to the parts placed on it. */
  node: string;
  /** Where bindings are written: `<bindingsRoot>/<module>/<part>/<requirement>/<key>`. */
  bindingsRoot: string;
  log: Logger;
  /** How often the node record's `seenAt` is refreshed; default 10 s. */
  heartbeatMs?: number;
  /** How long to wait for the provisioner to answer a credential fetch; default 5 s. */
  fetchTimeoutMs?: number;
  /** How long a replaced generation's files stay for readers still in them; default 2 s. */
  graceMs?: number;
  /** Between probe rounds (logins with the delivered values, providers' reachability); default 10 s. */
  probeIntervalMs?: number;
  /**
   * The hooks a part's `onRotate` may name on this node (`--allow-hook NAME=COMMAND`, parsed by
   * `parseAllowedHooks`); default none, so a part with an `onRotate` waits, saying which hook to allow.
   */
  hooks?: AllowedHooks;
  /** The unprivileged user hooks run as (`--hook-user`); default `nobody`. Switching needs an agent running as root. */
  hookUser?: string;
}
