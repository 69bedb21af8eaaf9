/**
 * Verdaccio auth plugin of the provisioning mesh (kind `npm.registry`): who may log in, and which
 * packages each user may read, publish and unpublish, decided per request from a users directory
 * that the mesh's provisioner writes. Verdaccio keeps its own access rules in its config, and
 * every edit of that is a restart that cuts holders off; this plugin reads the directory on every
 * request instead, so a user the mesh creates or retires takes effect at the next request.
 *
 * The directory (`auth.mesh-scopes.usersDir` in Verdaccio's config) holds one file per user,
 * `<user>.json`, written atomically (a rename) by the provisioner's `npm.registry` adapter:
 *
 *   { "user": "shop_pkgs_a", "scope": "@shop", "mark": "mesh grant shop/pkgs",
 *     "generation": 3, "hash": "sha256$<salt hex>$<digest hex>" }   (hash null: retired)
 *
 * `hash` is SHA-256(salt || password) of a password of 24 random bytes the mesh generated: no
 * plaintext is stored, and with that much entropy a slow hash adds nothing against guessing.
 *
 * Decisions:
 * - authenticate: the user's file exists, has a hash, and the password matches it (constant time);
 *   anything else is 401. A name that could not be a file of the mesh's is refused before any read.
 * - allow_access / allow_publish / allow_unpublish: the user is logged in now (its file has a hash:
 *   a token issued before it was retired no longer opens anything) and the package is in its
 *   scope (`@shop/…`); anything else is 401 (anonymous) or 403. The plugin answers every request
 *   itself, so Verdaccio's `packages:` rules are never reached.
 *
 * CommonJS with Node's built-ins only: Verdaccio `require`s it from its `plugins:` directory, where
 * none of the project's packages resolve.
 */
"use strict";
const { createHash, timingSafeEqual } = require("node:crypto");
const { readFile } = require("node:fs/promises");
const { join } = require("node:path");

/** The user names the mesh makes (`<base>_a`, `<base>_b`): nothing else is looked up as a file. */
const USER_NAME = /^[a-z][a-z0-9_]{0,120}_[ab]$/;
/** The scopes the mesh grants: `@<module>`, a mesh name. */
const SCOPE = /^@[a-z][a-z0-9-]{0,39}$/;

function httpError(status, message) {
  // The shape of the http-errors Verdaccio's own plugins return: it answers with `status`.
  return Object.assign(new Error(message), { status, statusCode: status, expose: true });
}

/** SHA-256(salt || password) against `sha256$<salt hex>$<digest hex>`, in constant time. */
function matches(hash, password) {
  if (typeof hash !== "string" || typeof password !== "string") return false;
  const parts = hash.split("$");
  if (parts.length !== 3 || parts[0] !== "sha256") return false;
  const salt = Buffer.from(parts[1], "hex");
  const want = Buffer.from(parts[2], "hex");
  const got = createHash("sha256").update(salt).update(password, "utf8").digest();
  return want.length === got.length && timingSafeEqual(want, got);
}

class MeshScopes {
  constructor(config, options) {
    this.logger = options && options.logger;
    if (!config || typeof config.usersDir !== "string" || config.usersDir === "") {
      throw new Error("verdaccio-mesh-scopes: set auth.mesh-scopes.usersDir in Verdaccio's config to the directory the mesh's npm.registry provider writes (its options.usersDir)");
    }
    this.usersDir = config.usersDir;
  }

  /** The user's record, or undefined when it has none (or a name the mesh never makes). */
  async record(user) {
    if (typeof user !== "string" || !USER_NAME.test(user)) return undefined;
    let text;
    try {
      text = await readFile(join(this.usersDir, `${user}.json`), "utf8");
    } catch (e) {
      if (e && e.code === "ENOENT") return undefined;
      throw e;
    }
    const r = JSON.parse(text);
    if (!r || r.user !== user || typeof r.scope !== "string" || !SCOPE.test(r.scope)) return undefined;
    return r;
  }

  authenticate(user, password, cb) {
    this.record(user).then(
      (r) => {
        if (r && r.hash && matches(r.hash, password)) return cb(null, [`mesh-scope:${r.scope}`]);
        cb(httpError(401, "bad username or password: use the credential the mesh delivered in the binding (its npmrc)"));
      },
      (e) => {
        if (this.logger) this.logger.error({ err: e && e.message }, "mesh-scopes: reading the users directory failed: @{err}");
        cb(httpError(500, "the registry cannot read its users directory; see its log"));
      },
    );
  }

  /** The decision for `what` (`read`, `publish`, `unpublish`) of package `pkg` by remote user `user`. */
  decide(what, user, pkg, cb) {
    if (!user || typeof user.name !== "string" || user.name === "") {
      return cb(httpError(401, `log in to ${what} ${pkg.name}: anonymous users may use nothing here`));
    }
    this.record(user.name).then(
      (r) => {
        if (!r || !r.hash) return cb(httpError(401, `user ${user.name} is not active on this registry (retired or removed): use the credential the mesh delivered last`));
        if (typeof pkg.name === "string" && pkg.name.startsWith(`${r.scope}/`)) return cb(null, true);
        cb(httpError(403, `user ${user.name} may ${what} only packages ${r.scope}/*, not ${pkg.name}`));
      },
      (e) => {
        if (this.logger) this.logger.error({ err: e && e.message }, "mesh-scopes: reading the users directory failed: @{err}");
        cb(httpError(500, "the registry cannot read its users directory; see its log"));
      },
    );
  }

  allow_access(user, pkg, cb) {
    this.decide("read", user, pkg, cb);
  }

  allow_publish(user, pkg, cb) {
    this.decide("publish", user, pkg, cb);
  }

  allow_unpublish(user, pkg, cb) {
    this.decide("unpublish", user, pkg, cb);
  }

  /** Users come from the mesh alone: `npm adduser` cannot make one. */
  adduser(user, _password, cb) {
    cb(httpError(409, `users of this registry are made by the mesh; ${user} cannot be added with npm adduser`));
  }

  changePassword(user, _password, _newPassword, cb) {
    cb(httpError(403, `passwords of this registry are set by the mesh (rotate the grant); ${user}'s cannot be changed here`));
  }
}

module.exports = function createMeshScopes(config, options) {
  return new MeshScopes(config, options);
};
module.exports.matches = matches;
