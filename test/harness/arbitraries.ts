/** fast-check arbitraries shared by property tests. */
import fc from "fast-check";
import { NAME_PATTERN } from "@mesh/shared";

/** Mesh names (module, requirement …) as the manifest schema accepts them. */
export const meshName = fc
  .stringMatching(/^[a-z](?:-?[a-z0-9]){0,39}$/)
  .map((s) => s.slice(0, 40).replace(/-$/, ""))
  .filter((s) => NAME_PATTERN.test(s));
