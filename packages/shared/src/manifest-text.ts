/**
 * @mesh/shared/manifest-text: manifests as text (YAML or JSON), decoded and validated. The one
 * entry that loads the YAML parser.
 */
export { parseManifestText } from "./schemas/manifest-text.js";
