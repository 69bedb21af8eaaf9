/** @mesh/resolver — resolution rules and the resolver service. */
export { startResolver, type Resolver } from "./resolver.js";
export { handleApply } from "./apply.js";
export { reconcileModule } from "./reconcile.js";
export { ProviderCatalog } from "@mesh/shared/runtime";
export { applyResolution, chooseProvider, candidatesFor, resolveModule, builtinSecretProvider, type Resolution } from "./resolve.js";
export { ReachabilityCatalog, unreachableFrom } from "./reachability.js";
export { handleDelete, deleteProblems, servedBy } from "./delete.js";
