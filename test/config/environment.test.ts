import { describe, expect, test } from "bun:test";
import { type ServeSettings, serveSettings } from "../../src/config/environment";
import { ConfigError } from "../../src/config/load";

describe("serveSettings", () => {
  test("unset and empty values take the defaults (a unit file's `SLUICE_PORT=` is not port 0)", () => {
    const defaults: ServeSettings = {
      hostname: "127.0.0.1",
      port: 8080,
      drainMs: 30_000,
      logLevel: "info",
      metricsToken: undefined,
      tracing: undefined,
      keyFileCheckMs: 5000,
      trustedProxies: undefined,
      corsOrigins: undefined,
      logClientAddresses: false,
    };
    expect(serveSettings({})).toEqual(defaults);
    expect(serveSettings({ SLUICE_HOST: "", SLUICE_PORT: "", SLUICE_DRAIN_MS: " ", SLUICE_LOG_LEVEL: "", SLUICE_METRICS_TOKEN: "" })).toEqual(defaults);
  });

  test("values as an operator writes them", () => {
    expect(serveSettings({ SLUICE_HOST: "0.0.0.0", SLUICE_PORT: "0", SLUICE_DRAIN_MS: "0", SLUICE_LOG_LEVEL: "warn", SLUICE_METRICS_TOKEN: "t" })).toEqual({
      hostname: "0.0.0.0",
      port: 0,
      drainMs: 0,
      logLevel: "warn",
      metricsToken: "t",
      tracing: undefined,
      keyFileCheckMs: 5000,
      trustedProxies: undefined,
      corsOrigins: undefined,
      logClientAddresses: false,
    });
    expect(serveSettings({ SLUICE_PORT: "65535", SLUICE_DRAIN_MS: "3600000", SLUICE_LOG_LEVEL: "WARN" })).toMatchObject({
      port: 65_535,
      drainMs: 3_600_000,
      logLevel: "warn",
    });
  });

  test("anything else is a ConfigError naming the variable and the value", () => {
    const cases: [string, string][] = [
      ["SLUICE_PORT", "65536"],
      ["SLUICE_PORT", "80 80"],
      ["SLUICE_PORT", "+80"],
      ["SLUICE_PORT", "Infinity"],
      ["SLUICE_DRAIN_MS", "3600001"],
      ["SLUICE_DRAIN_MS", "NaN"],
      ["SLUICE_KEY_FILE_CHECK_MS", "5s"],
      ["SLUICE_LOG_LEVEL", "verbose"],
      ["SLUICE_LOG_LEVEL", "trace"],
      ["SLUICE_LOG_CLIENT_IP", "yes"],
    ];
    for (const [name, value] of cases) {
      expect(() => serveSettings({ [name]: value })).toThrow(ConfigError);
      expect(() => serveSettings({ [name]: value })).toThrow(`${name} must be`);
      expect(() => serveSettings({ [name]: value })).toThrow(`"${value}"`);
    }
  });

  test("SLUICE_LOG_CLIENT_IP: true or false, 1 or 0, in any case", () => {
    expect(["true", "TRUE", "1", "false", "0", ""].map((value) => serveSettings({ SLUICE_LOG_CLIENT_IP: value }).logClientAddresses)).toEqual([
      true,
      true,
      true,
      false,
      false,
      false,
    ]);
  });

  test("SLUICE_CORS_ORIGINS: * alone, or origins as a browser writes them", () => {
    expect(serveSettings({ SLUICE_CORS_ORIGINS: "*" }).corsOrigins).toEqual({ any: true, origins: [] });
    expect(serveSettings({ SLUICE_CORS_ORIGINS: "https://app.example.com, http://localhost:3000" }).corsOrigins).toEqual({
      any: false,
      origins: ["https://app.example.com", "http://localhost:3000"],
    });
    for (const value of [
      "*, https://app.example.com",
      "https://app.example.com/",
      "app.example.com",
      "https://app.example.com/path",
      "ftp://files.example.com",
      "null",
    ]) {
      expect(() => serveSettings({ SLUICE_CORS_ORIGINS: value })).toThrow(ConfigError);
      expect(() => serveSettings({ SLUICE_CORS_ORIGINS: value })).toThrow("SLUICE_CORS_ORIGINS must be");
    }
  });

  test("SLUICE_TRUSTED_PROXIES: addresses and CIDR ranges separated by commas, each checked", () => {
    expect(serveSettings({ SLUICE_TRUSTED_PROXIES: " 10.0.0.0/8, 127.0.0.1 ,::1,10.0.0.0/8" }).trustedProxies).toEqual(["10.0.0.0/8", "127.0.0.1", "::1"]);
    for (const value of ["10.0.0.0/33", "proxy.internal", "10.0.0.1,", "10.0.0.0/8/8", "2001:db8::/129", "10.0.0.0/-1"]) {
      expect(() => serveSettings({ SLUICE_TRUSTED_PROXIES: value })).toThrow(ConfigError);
      expect(() => serveSettings({ SLUICE_TRUSTED_PROXIES: value })).toThrow("SLUICE_TRUSTED_PROXIES: ");
    }
  });
});
