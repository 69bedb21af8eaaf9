/**
 * The code's walls, checked by `npm run lint` (dependency-cruiser): no import cycle between
 * source files, type-only imports counted; the services and packages import only what sits
 * below them; and every package a file imports is listed in its package.json.
 */
module.exports = {
  forbidden: [
    {
      name: "no-cycle",
      severity: "error",
      comment: "A cycle, type-only imports counted: move the rule both sides need below both.",
      from: {},
      to: { circular: true },
    },
    {
      name: "shared-is-the-floor",
      severity: "error",
      comment: "@mesh/shared holds the rules everything else uses; it imports no other workspace.",
      from: { path: "^packages/shared/" },
      to: { path: "^(packages/(?!shared/)|services/)" },
    },
    {
      name: "sdk-on-shared-alone",
      severity: "error",
      comment: "The SDK (@mesh/client) is what modules embed: it imports @mesh/shared and nothing else of the mesh.",
      from: { path: "^packages/client/" },
      to: { path: "^(packages/(?!client/|shared/)|services/)" },
    },
    {
      name: "sdk-without-the-services-logger",
      severity: "error",
      comment:
        "The SDK loads no logger of its own (pino) and no YAML parser but for a manifest's text: it imports @mesh/shared and @mesh/shared/runtime, not @mesh/shared/service.",
      from: { path: "^packages/client/" },
      to: { path: "^packages/shared/(src|dist)/(service|logger|service-main)\\.(ts|js|d\\.ts)$" },
    },
    {
      name: "pure-entry-stays-pure",
      severity: "error",
      comment:
        "@mesh/shared's own entry is the vocabulary: it reaches no connection, store, logger or YAML parser (those are its runtime, service and manifest-text entries).",
      from: { path: "^packages/shared/src/index\\.ts$" },
      to: { reachable: true, path: "^packages/shared/src/(connect|store|request-json|logger|service-main|tracing|schemas/manifest-text)\\.ts$" },
    },
    {
      name: "resolver-without-providers",
      severity: "error",
      comment: "The resolver checks manifests with the pure rules in @mesh/shared; loading @mesh/providers would load every database driver.",
      from: { path: "^services/resolver/" },
      to: { path: "^packages/providers/" },
    },
    {
      name: "services-apart",
      severity: "error",
      comment: "A service imports no other service (what two share belongs below both), and meshctl starts them as programs.",
      from: { path: "^(services/[^/]+|packages/cli)/" },
      to: { path: "^services/", pathNot: "^$1/" },
    },
    {
      name: "no-unlisted-package",
      severity: "error",
      comment: "An npm package imported by a workspace's source is listed in that workspace's package.json (tests use the root's).",
      from: { path: "^(packages|services)/[^/]+/src/", pathNot: "\\.test\\.ts$|/test-fixtures\\.ts$" },
      to: { dependencyTypes: ["npm-no-pkg", "npm-unknown"] },
    },
    {
      name: "no-unresolvable",
      severity: "error",
      from: {},
      to: { couldNotResolve: true },
    },
  ],
  options: {
    // Another workspace is reached through its build (`tsc -b` first), and not followed: each
    // workspace's own files are cruised from its sources.
    doNotFollow: { path: ["node_modules", "(^|/)dist/"] },
    // `import type` is an edge too: a cycle of types is a cycle of concepts.
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.test.json" },
    enhancedResolveOptions: { exportsFields: ["exports"], conditionNames: ["import", "require", "node", "default", "types"] },
    combinedDependencies: false,
  },
};
