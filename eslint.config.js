// The linter's rules for every TypeScript file of the repository: typescript-eslint's
// recommended set, with the few the code base relies on stated here. Formatting is Prettier's
// (.prettierrc.json), and import cycles and walls are dependency-cruiser's (.dependency-cruiser.cjs).
import js from "@eslint/js";
import tseslint from "typescript-eslint";
import globals from "globals";

export default tseslint.config(
  { ignores: ["**/dist/**", "dist-release/**", "**/node_modules/**", "schemas/**", "packages/cli/src/console/static/**"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { ecmaVersion: 2023, sourceType: "module", globals: globals.node },
    rules: {
      // `_name` marks a parameter or binding kept for its position or shape.
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_", caughtErrors: "none", ignoreRestSiblings: true }],
      // Type-only imports are written as such, so a reader (and the cycle check) sees which are.
      "@typescript-eslint/consistent-type-imports": ["error", { fixStyle: "inline-type-imports" }],
      "@typescript-eslint/no-import-type-side-effects": "error",
    },
  },
  // The web console's script runs in the browser.
  { files: ["packages/cli/assets/**/*.js"], languageOptions: { globals: globals.browser } },
  // Plain JavaScript (the bin shims, a Verdaccio plugin, the benchmark runner) may require().
  { files: ["**/*.{js,cjs}"], rules: { "@typescript-eslint/no-require-imports": "off" } },
);
