// The API client: JSON over fetch with the bearer token, one error shape, and the token's
// cookie for EventSource (which cannot send headers; the API accepts the cookie on GET).

const TOKEN_KEY = "ragbus.token";
const COOKIE = "ragbus_token";

export class ApiError extends Error {
  constructor(status, code, message, field = null) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.field = field;
  }

  /** As the API said it: `code: message (field …)`. */
  describe() {
    const field = this.field ? ` (field ${this.field})` : "";
    return `${this.code}: ${this.message}${field}`;
  }
}

let unauthorizedHandler = null;

/** Called with the ApiError whenever the API answers 401. */
export function onUnauthorized(handler) {
  unauthorizedHandler = handler;
}

export function token() {
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

/** A token a cookie can carry as it is: printable ASCII without `;`, `,`, quotes or `\`. */
export function cookieSafe(value) {
  return /^[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]+$/.test(value);
}

export function setToken(value) {
  sessionStorage.setItem(TOKEN_KEY, value);
  writeCookie(value);
}

export function restoreToken() {
  const value = token();
  if (value) writeCookie(value);
  return value;
}

export function clearToken() {
  try {
    sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    /* storage disabled: nothing kept */
  }
  document.cookie = `${COOKIE}=; path=/v1; SameSite=Strict; Max-Age=0`;
}

function writeCookie(value) {
  const secure = location.protocol === "https:" ? "; Secure" : "";
  document.cookie = `${COOKIE}=${value}; path=/v1; SameSite=Strict${secure}`;
}

/** `method path` with an optional JSON body; resolves to the parsed JSON (or null). */
export async function request(method, path, body) {
  const headers = { Accept: "application/json" };
  const bearer = token();
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  const init = { method, headers, credentials: "same-origin", cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (exc) {
    throw new ApiError(0, "network_error", `could not reach the API (${exc.message || exc})`);
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!response.ok) {
    const detail = data && typeof data === "object" ? data.error : null;
    const error = new ApiError(
      response.status,
      (detail && detail.code) || `http_${response.status}`,
      (detail && detail.message) || text.trim().slice(0, 500) || response.statusText || "request failed",
      (detail && detail.field) || null,
    );
    if (response.status === 401 && unauthorizedHandler) unauthorizedHandler(error);
    throw error;
  }
  return data;
}

export const get = (path) => request("GET", path);
export const post = (path, body) => request("POST", path, body);
export const del = (path) => request("DELETE", path);
