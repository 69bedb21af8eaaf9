/** @mesh/resolver — resolution rules and the resolver service. */
export { startResolver, type Resolver } from "./resolver.js";
export { handleApply } from "./apply.js";
export { reconcileModule, ProviderCatalog } from "./reconcile.js";
export { applyResolution, chooseProvider, candidatesFor, resolveModule, builtinSecretProvider, type Resolution } from "./resolve.js";
export { ReachabilityCatalog, unreachableFrom } from "./reachability.js";
export { handleDelete, deleteProblems, servedBy } from "./delete.js";
