/**
 * The `latest` dist-tag of a package a handover copies version by version: npm's publish
 * request names the tag with the version it carries, and a registry sets the tag to whatever
 * the last request said. Copied in any order (the copy takes versions in name order, where
 * 1.10.0 comes before 1.9.0), `latest` would end on whichever came last; it is chosen here
 * by semver instead.
 */
import semver from "semver";

/** A release outranks a prerelease, and either outranks a version that is not semver. */
const rank = (v: string) => (semver.valid(v) === null ? 0 : semver.prerelease(v) === null ? 2 : 1);

/**
 * The version `latest` should name among `versions`: the highest release by semver, else the
 * highest prerelease (so `npm install <name>` gets a release whenever there is one), else the
 * last of them that is not semver at all; undefined for none. Pure.
 */
export function highestVersion(versions: Iterable<string | undefined>): string | undefined {
  let best: string | undefined;
  for (const v of versions) {
    if (v === undefined) continue;
    if (best === undefined || rank(v) > rank(best) || (rank(v) === rank(best) && (rank(v) === 0 || semver.gt(v, best)))) best = v;
  }
  return best;
}

/** `latest` once `published` is published where `latest` was `current` (undefined: none yet). Pure. */
export function latestAfter(current: string | undefined, published: string): string {
  return highestVersion([current, published]) ?? published;
}
