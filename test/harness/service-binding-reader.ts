/**
 * `kube-service-bindings`, the Node servicebinding.io reader, pointed at one directory as
 * `SERVICE_BINDING_ROOT` for one call (the library reads the variable itself), as a part's own
 * code would read its bindings.
 */
import kubeServiceBindings from "kube-service-bindings";

/** Its `getBinding`: with a type and client, that binding mapped for the client; with neither (undeclared in its types), every binding's files. */
const getBinding = kubeServiceBindings.getBinding as unknown as (type?: string, client?: string) => unknown;

function withRoot<T>(root: string, read: () => T): T {
  const before = process.env.SERVICE_BINDING_ROOT;
  process.env.SERVICE_BINDING_ROOT = root;
  try {
    return read();
  } finally {
    if (before === undefined) delete process.env.SERVICE_BINDING_ROOT;
    else process.env.SERVICE_BINDING_ROOT = before;
  }
}

/** Every binding under `root`, as the untyped `getBinding()` returns them: one key → value map each. */
export function readAllBindings(root: string): Array<Record<string, string>> {
  return withRoot(root, () => getBinding() as Array<Record<string, string>>);
}

/** The binding of `type` under `root`, mapped for `client` (`getBinding("POSTGRESQL", "pg")`). */
export function readBindingFor<T>(root: string, type: string, client: string): T {
  return withRoot(root, () => getBinding(type, client) as T);
}
