import { describe, expect, it } from "vitest";
import { highestVersion, latestAfter } from "./npm-dist-tags.js";

describe("the latest dist-tag of a copied package", () => {
  it("is the highest version by semver, not the last in name order", () => {
    const nameOrder = ["1.10.0", "1.2.0", "1.9.0"];
    expect([...nameOrder].sort()).toEqual(nameOrder);
    expect(highestVersion(nameOrder)).toBe("1.10.0");
    // Published one by one in that order, each publish keeping the higher of the two.
    expect(nameOrder.reduce<string | undefined>((latest, v) => latestAfter(latest, v), undefined)).toBe("1.10.0");
  });

  it("does not move down when a lower version is copied after a higher one is there", () => {
    expect(latestAfter("2.0.0", "1.10.0")).toBe("2.0.0");
    expect(latestAfter("1.9.0", "1.10.0")).toBe("1.10.0");
    expect(latestAfter(undefined, "0.1.0")).toBe("0.1.0");
  });

  it("prefers a release to a higher prerelease, and takes a prerelease only when there is no release", () => {
    expect(highestVersion(["1.0.0", "2.0.0-rc.1", "1.1.0"])).toBe("1.1.0");
    expect(highestVersion(["2.0.0-rc.1", "2.0.0-rc.10", "2.0.0-rc.2"])).toBe("2.0.0-rc.10");
    expect(latestAfter("1.0.0", "2.0.0-beta.1")).toBe("1.0.0");
    expect(latestAfter("2.0.0-beta.1", "1.0.0")).toBe("1.0.0");
  });

  it("ranks a version that is not semver below any that is", () => {
    expect(latestAfter("not-a-version", "0.0.1")).toBe("0.0.1");
    expect(latestAfter("0.0.1", "not-a-version")).toBe("0.0.1");
    expect(highestVersion([])).toBeUndefined();
  });
});
