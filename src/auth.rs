//! Tenants and API tokens: `store.auth()` and `store.authenticate(secret)`.
//!
//! A tenant is active, suspended or archived; a suspended or archived tenant can read, but
//! the store refuses every write of its views with `TenantSuspended` (the actor checks the
//! tenant's status once per batch). Tenant administration needs the `admin` role.
//!
//! An API token is 32 random bytes, handed out once as `spn_<43 base62 characters><6
//! characters of checksum>`. Only the SHA-256 of the secret is stored. Authentication checks
//! the checksum first (in constant time, so a mistyped token never reaches the database), then
//! looks the hash up in one query that also checks revocation and expiry, and returns a store
//! view bound to the token's tenant and role. A token's `last_used_at_ms` is refreshed at most
//! once a minute. `TokenSecret`'s `Debug` never prints the secret.

use std::fmt;
use std::sync::Arc;

use crate::core::db::{Row, args};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::core::op::{Access, Op, Role, sealed::Sealed};
use crate::core::tx::{Scope, Tx};
use crate::error::{Error, Result};
use crate::page::sql_limit;
use crate::store::Store;

/// Where a tenant is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TenantStatus {
    /// Reads and writes.
    Active,
    /// Reads only: every write is `TenantSuspended`.
    Suspended,
    /// Kept for the record: reads only, like a suspended tenant.
    Archived,
}

impl TenantStatus {
    /// The status as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            TenantStatus::Active => "active",
            TenantStatus::Suspended => "suspended",
            TenantStatus::Archived => "archived",
        }
    }

    fn parse(text: &str) -> Result<Self> {
        match text {
            "active" => Ok(TenantStatus::Active),
            "suspended" => Ok(TenantStatus::Suspended),
            "archived" => Ok(TenantStatus::Archived),
            other => Err(Error::Corrupt(format!("unknown tenant status {other:?}"))),
        }
    }
}

/// A tenant as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Tenant {
    /// Its id (what `Store::tenant` takes).
    pub id: String,
    /// Its display name.
    pub name: String,
    /// Where it is in its life.
    pub status: TenantStatus,
    /// When it was created.
    pub created_at_ms: i64,
    /// When it last changed.
    pub updated_at_ms: i64,
}

/// What to change of a tenant; `None` keeps the field. `#[non_exhaustive]`: start from
/// `TenantUpdate::default()` (nothing changes) and chain the setters,
/// `TenantUpdate::default().status(TenantStatus::Suspended)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TenantUpdate {
    /// A new display name.
    pub name: Option<String>,
    /// A new status.
    pub status: Option<TenantStatus>,
}

impl TenantUpdate {
    /// Renames the tenant.
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Moves the tenant to `status`.
    #[must_use]
    pub fn status(mut self, status: TenantStatus) -> Self {
        self.status = Some(status);
        self
    }
}

/// An API token's secret, as handed out once. `Debug` does not print it; `expose` does. It
/// has no `PartialEq`: secrets are compared by their hash, never directly.
#[derive(Clone)]
pub struct TokenSecret(String);

impl TokenSecret {
    /// Wraps a secret presented by a caller.
    pub fn new(secret: impl Into<String>) -> Self {
        Self(secret.into())
    }

    /// The secret itself, to show once or to send.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for TokenSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenSecret(<redacted>)")
    }
}

/// An API token as stored (without its secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TokenInfo {
    /// Its id.
    pub id: String,
    /// The tenant its views are bound to.
    pub tenant_id: String,
    /// Its name.
    pub name: String,
    /// The role of its views.
    pub role: Role,
    /// When it was created.
    pub created_at_ms: i64,
    /// When it stops working, if ever.
    pub expires_at_ms: Option<i64>,
    /// When it was revoked.
    pub revoked_at_ms: Option<i64>,
    /// When it was last used (refreshed at most once a minute).
    pub last_used_at_ms: Option<i64>,
}

/// Creates a tenant. Needs the store owner's administrator (not a token's view).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateTenant {
    /// Its id.
    pub id: String,
    /// Its display name.
    pub name: String,
}

/// Reads a tenant. Needs the `admin` role; a token's view reads only its own tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetTenant {
    /// Its id.
    pub id: String,
}

/// Reads up to `Limits::page_size_max` tenants, by id. Needs the store owner's administrator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListTenants;

/// Changes a tenant's name or status. Needs the store owner's administrator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateTenant {
    /// Its id.
    pub id: String,
    /// What to change.
    pub update: TenantUpdate,
}

/// Creates an API token for the view's tenant. Needs the `admin` role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateToken {
    /// Its name.
    pub name: String,
    /// The role of the views it opens.
    pub role: Role,
    /// When it stops working, if ever.
    pub expires_at_ms: Option<i64>,
}

/// Revokes a token of the view's tenant (revoking twice does nothing). Needs `admin`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevokeToken {
    /// The token.
    pub id: String,
}

/// Reads up to `Limits::page_size_max` tokens of the view's tenant, by id. Needs `admin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListTokens;

/// Checks a secret: the token it belongs to, if valid (not revoked, not expired).
#[derive(Debug, Clone)]
pub struct Authenticate {
    /// The secret presented.
    pub secret: TokenSecret,
}

/// Records that a token was used now (at most once a minute).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TouchToken {
    pub(crate) id: String,
}

/// The columns `raw_token` reads, in order.
macro_rules! token_columns {
    () => {
        "token_id, tenant_id, name, role, created_at_ms, expires_at_ms, revoked_at_ms,
         last_used_at_ms"
    };
}

/// How often `last_used_at_ms` is refreshed, at most.
const TOUCH_EVERY_MS: i64 = 60_000;
const PREFIX: &str = "spn_";
const BODY_CHARS: usize = 43;
const CHECKSUM_CHARS: usize = 6;
const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

impl Sealed for CreateTenant {}
impl Op for CreateTenant {
    type Output = Tenant;
    fn access(&self) -> Access {
        Access::Admin
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Tenant> {
        require_system(tx)?;
        tx.limits().check_id("tenant id", &self.id)?;
        tx.limits().check_id("tenant name", &self.name)?;
        if select_tenant(tx, &self.id)?.is_some() {
            return Err(Error::Conflict(format!("tenant {} exists", self.id)));
        }
        tx.db().execute(
            "INSERT INTO main.tenants (tenant_id, name, status, created_at_ms, updated_at_ms)
                 VALUES (?1, ?2, 'active', ?3, ?3)",
            args![self.id, self.name, tx.now_ms()],
        )?;
        tx.tenants_changed();
        select_tenant(tx, &self.id)?.ok_or_else(|| Error::not_found("tenant", &self.id))
    }
}

impl Sealed for GetTenant {}
impl Op for GetTenant {
    type Output = Tenant;
    fn access(&self) -> Access {
        Access::Admin
    }
    fn writes(&self) -> bool {
        false
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Tenant> {
        tx.limits().check_id("tenant id", &self.id)?;
        let visible = tx.is_system() || self.id == tx.tenant();
        let tenant = if visible { select_tenant(tx, &self.id)? } else { None };
        tenant.ok_or_else(|| Error::not_found("tenant", &self.id))
    }
}

impl Sealed for ListTenants {}
impl Op for ListTenants {
    type Output = Vec<Tenant>;
    fn access(&self) -> Access {
        Access::Admin
    }
    fn writes(&self) -> bool {
        false
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<Tenant>> {
        require_system(tx)?;
        let limit = sql_limit(tx.limits().page_size_max);
        tx.db().query_all(
            "SELECT tenant_id, name, status, created_at_ms, updated_at_ms FROM main.tenants
             ORDER BY tenant_id LIMIT ?1",
            args![limit],
            |row| raw_tenant(row)?.decode(),
        )
    }
}

impl Sealed for UpdateTenant {}
impl Op for UpdateTenant {
    type Output = Tenant;
    fn access(&self) -> Access {
        Access::Admin
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Tenant> {
        require_system(tx)?;
        tx.limits().check_id("tenant id", &self.id)?;
        let current =
            select_tenant(tx, &self.id)?.ok_or_else(|| Error::not_found("tenant", &self.id))?;
        let was_active = current.status == TenantStatus::Active;
        let name = self.update.name.unwrap_or(current.name);
        tx.limits().check_id("tenant name", &name)?;
        let status = self.update.status.unwrap_or(current.status);
        tx.db().execute(
            "UPDATE main.tenants SET name = ?2, status = ?3, updated_at_ms = ?4
                 WHERE tenant_id = ?1",
            args![self.id, name, status.as_str(), tx.now_ms()],
        )?;
        tx.tenants_changed();
        if status == TenantStatus::Active && !was_active {
            // The store's sweeps passed the tenant over while it could not write (its
            // schedules' ticks, say): they look at it again at once.
            tx.set_alarm(tx.now_ms());
        }
        select_tenant(tx, &self.id)?.ok_or_else(|| Error::not_found("tenant", &self.id))
    }
}

impl Sealed for CreateToken {}
impl Op for CreateToken {
    type Output = (TokenSecret, TokenInfo);
    fn access(&self) -> Access {
        Access::Admin
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<(TokenSecret, TokenInfo)> {
        tx.limits().check_id("token name", &self.name)?;
        if select_tenant(tx, tx.tenant())?.is_none() {
            // A tenant without a row could never be suspended: its tokens need one.
            return Err(Error::not_found("tenant", tx.tenant()));
        }
        if self.expires_at_ms.is_some_and(|at_ms| at_ms <= tx.now_ms()) {
            return Err(Error::InvalidInput("a token must expire in the future".into()));
        }
        let secret = new_secret(tx);
        let id = tx.new_id();
        tx.db().execute(
            "INSERT INTO main.api_tokens (token_id, tenant_id, name, role, secret_hash,
                                         created_at_ms, expires_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            args![
                id,
                tx.tenant(),
                self.name,
                self.role.as_str(),
                secret_hash(secret.expose()),
                tx.now_ms(),
                self.expires_at_ms,
            ],
        )?;
        let info = select_token(tx, &id)?.ok_or_else(|| Error::not_found("token", &id))?;
        Ok((secret, info))
    }
}

impl Sealed for RevokeToken {}
impl Op for RevokeToken {
    type Output = ();
    fn access(&self) -> Access {
        Access::Admin
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<()> {
        tx.limits().check_id("token id", &self.id)?;
        let token = select_token(tx, &self.id)?.filter(|token| token.tenant_id == tx.tenant());
        if token.is_none() {
            return Err(Error::not_found("token", &self.id));
        }
        tx.db().execute(
            "UPDATE main.api_tokens SET revoked_at_ms = ?2
                 WHERE token_id = ?1 AND revoked_at_ms IS NULL",
            args![self.id, tx.now_ms()],
        )?;
        Ok(())
    }
}

impl Sealed for ListTokens {}
impl Op for ListTokens {
    type Output = Vec<TokenInfo>;
    fn access(&self) -> Access {
        Access::Admin
    }
    fn writes(&self) -> bool {
        false
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<Vec<TokenInfo>> {
        let limit = sql_limit(tx.limits().page_size_max);
        tx.db().query_all(
            concat!(
                "SELECT ",
                token_columns!(),
                " FROM main.api_tokens INDEXED BY api_tokens_by_tenant
                  WHERE tenant_id = ?1 ORDER BY token_id LIMIT ?2"
            ),
            args![tx.tenant(), limit],
            |row| raw_token(row)?.decode(),
        )
    }
}

impl Sealed for Authenticate {}
impl Op for Authenticate {
    type Output = TokenInfo;
    fn access(&self) -> Access {
        Access::Read
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<TokenInfo> {
        if !checksum_holds(self.secret.expose()) {
            return Err(Error::Unauthorized);
        }
        let hash = secret_hash(self.secret.expose());
        let row = tx.db().query_opt(
            concat!(
                "SELECT ",
                token_columns!(),
                " FROM main.api_tokens WHERE secret_hash = ?1 AND revoked_at_ms IS NULL
                    AND (expires_at_ms IS NULL OR expires_at_ms > ?2)"
            ),
            args![hash, tx.now_ms()],
            raw_token,
        )?;
        row.ok_or(Error::Unauthorized)?.decode()
    }
}

impl Sealed for TouchToken {}
impl Op for TouchToken {
    type Output = ();
    fn access(&self) -> Access {
        Access::Admin
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<()> {
        tx.db().execute(
            "UPDATE main.api_tokens SET last_used_at_ms = ?2
                 WHERE token_id = ?1 AND (last_used_at_ms IS NULL OR last_used_at_ms <= ?3)",
            args![self.id, tx.now_ms(), tx.now_ms() - TOUCH_EVERY_MS],
        )?;
        Ok(())
    }
}

/// Tenants and tokens: `store.auth()`.
#[derive(Debug, Clone, Copy)]
pub struct Auth<'a> {
    store: &'a Store,
}

impl<'a> Auth<'a> {
    pub(crate) fn new(store: &'a Store) -> Self {
        Self { store }
    }

    /// Creates an active tenant.
    ///
    /// # Errors
    /// `Conflict` if it exists; `InvalidInput`/`TooLarge` for a bad id or name; `Forbidden`
    /// without the `admin` role.
    pub fn create_tenant(&self, id: &str, name: &str) -> Result<Tenant> {
        self.store.exec(CreateTenant { id: id.into(), name: name.into() })
    }

    /// One tenant.
    ///
    /// # Errors
    /// `NotFound` for an unknown tenant; `Forbidden` without the `admin` role.
    pub fn tenant(&self, id: &str) -> Result<Tenant> {
        self.store.exec(GetTenant { id: id.into() })
    }

    /// The tenants, by id (at most `Limits::page_size_max`).
    ///
    /// # Errors
    /// `Forbidden` without the `admin` role.
    pub fn tenants(&self) -> Result<Vec<Tenant>> {
        self.store.exec(ListTenants)
    }

    /// Changes a tenant's name or status (suspending it refuses its writes from the next
    /// batch on).
    ///
    /// # Errors
    /// `NotFound` for an unknown tenant; `Forbidden` without the `admin` role.
    pub fn update_tenant(&self, id: &str, update: TenantUpdate) -> Result<Tenant> {
        self.store.exec(UpdateTenant { id: id.into(), update })
    }

    /// Creates a token for this view's tenant; the secret is returned here and never again.
    ///
    /// # Errors
    /// `InvalidInput` for a bad name or an expiry in the past; `Forbidden` without `admin`.
    pub fn create_token(
        &self,
        name: &str,
        role: Role,
        expires_at_ms: Option<i64>,
    ) -> Result<(TokenSecret, TokenInfo)> {
        self.store.exec(CreateToken { name: name.into(), role, expires_at_ms })
    }

    /// Revokes a token of this view's tenant.
    ///
    /// # Errors
    /// `NotFound` for an unknown token (or another tenant's); `Forbidden` without `admin`.
    pub fn revoke_token(&self, id: &str) -> Result<()> {
        self.store.exec(RevokeToken { id: id.into() })
    }

    /// The tokens of this view's tenant, by id (at most `Limits::page_size_max`).
    ///
    /// # Errors
    /// `Forbidden` without the `admin` role.
    pub fn tokens(&self) -> Result<Vec<TokenInfo>> {
        self.store.exec(ListTokens)
    }
}

/// Checks a secret and returns the token it belongs to; refreshes its `last_used_at_ms` when
/// more than a minute old (when the calling view may).
pub(crate) fn authenticate(store: &Store, secret: &str) -> Result<TokenInfo> {
    let info = store.exec(Authenticate { secret: TokenSecret::new(secret) })?;
    let stale = info
        .last_used_at_ms
        .is_none_or(|at_ms| store.now_ms().saturating_sub(at_ms) >= TOUCH_EVERY_MS);
    if stale && store.role().allows(Access::Admin) {
        // A failed refresh does not fail the authentication.
        let _ = store.exec(TouchToken { id: info.id.clone() });
    }
    Ok(info)
}

/// 32 random bytes (from the store's randomness) as `spn_<body><checksum>`.
fn new_secret(tx: &Tx<'_>) -> TokenSecret {
    let mut bytes = [0_u8; 32];
    tx.fill_random(&mut bytes);
    secret_from(&bytes)
}

fn secret_from(bytes: &[u8; 32]) -> TokenSecret {
    let body = base62(bytes, BODY_CHARS);
    let checksum = checksum_of(&body);
    TokenSecret(format!("{PREFIX}{body}{checksum}"))
}

/// The checksum of a body: the first 4 bytes of its SHA-256, in 6 base62 characters.
fn checksum_of(body: &str) -> String {
    let digest = Sha256::digest(format!("{PREFIX}{body}").as_bytes());
    base62(&digest[..4], CHECKSUM_CHARS)
}

/// Whether a presented secret has the token shape and a matching checksum, compared in
/// constant time.
fn checksum_holds(secret: &str) -> bool {
    let Some(rest) = secret.strip_prefix(PREFIX) else { return false };
    if rest.len() != BODY_CHARS + CHECKSUM_CHARS || !rest.bytes().all(|b| b.is_ascii_alphanumeric())
    {
        return false;
    }
    let (body, presented) = rest.split_at(BODY_CHARS);
    let expected = checksum_of(body);
    let differences =
        expected.bytes().zip(presented.bytes()).fold(0_u8, |acc, (a, b)| acc | (a ^ b));
    differences == 0
}

/// `bytes` as a big-endian number in `width` base62 digits.
fn base62(bytes: &[u8], width: usize) -> String {
    let mut number = bytes.to_vec();
    let mut digits = Vec::with_capacity(width);
    for _ in 0..width {
        let mut remainder = 0_u32;
        for byte in &mut number {
            let value = (remainder << 8) | u32::from(*byte);
            *byte = u8::try_from(value / 62).unwrap_or(0);
            remainder = value % 62;
        }
        digits.push(BASE62[remainder as usize]);
    }
    digits.reverse();
    String::from_utf8_lossy(&digits).into_owned()
}

fn secret_hash(secret: &str) -> String {
    crate::hash::hex(&Sha256::digest(secret.as_bytes()))
}

/// Refuses tenant administration to any view but the store owner's administrator.
fn require_system(tx: &Tx<'_>) -> Result<()> {
    if !tx.is_system() {
        return Err(Error::Forbidden(
            "tenant administration needs the store's own administrator, not a token".into(),
        ));
    }
    Ok(())
}

fn select_tenant(tx: &Tx<'_>, id: &str) -> Result<Option<Tenant>> {
    tx.db()
        .query_opt(
            "SELECT tenant_id, name, status, created_at_ms, updated_at_ms FROM main.tenants
             WHERE tenant_id = ?1",
            args![id],
            raw_tenant,
        )?
        .map(RawTenant::decode)
        .transpose()
}

struct RawTenant(String, String, String, i64, i64);

impl RawTenant {
    fn decode(self) -> Result<Tenant> {
        let RawTenant(id, name, status, created_at_ms, updated_at_ms) = self;
        let status = TenantStatus::parse(&status)?;
        Ok(Tenant { id, name, status, created_at_ms, updated_at_ms })
    }
}

fn raw_tenant(row: &Row<'_>) -> Result<RawTenant> {
    Ok(RawTenant(row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?, row.get(4)?))
}

fn select_token(tx: &Tx<'_>, id: &str) -> Result<Option<TokenInfo>> {
    tx.db()
        .query_opt(
            concat!("SELECT ", token_columns!(), " FROM main.api_tokens WHERE token_id = ?1"),
            args![id],
            raw_token,
        )?
        .map(RawToken::decode)
        .transpose()
}

struct RawToken {
    id: String,
    tenant_id: String,
    name: String,
    role: String,
    times: [Option<i64>; 4],
}

impl RawToken {
    fn decode(self) -> Result<TokenInfo> {
        let [created, expires_at_ms, revoked_at_ms, last_used_at_ms] = self.times;
        Ok(TokenInfo {
            id: self.id,
            tenant_id: self.tenant_id,
            name: self.name,
            role: parse_role(&self.role)?,
            created_at_ms: created.unwrap_or(0),
            expires_at_ms,
            revoked_at_ms,
            last_used_at_ms,
        })
    }
}

fn raw_token(row: &Row<'_>) -> Result<RawToken> {
    Ok(RawToken {
        id: row.get(0)?,
        tenant_id: row.get(1)?,
        name: row.get(2)?,
        role: row.get(3)?,
        times: [row.get(4)?, row.get(5)?, row.get(6)?, row.get(7)?],
    })
}

fn parse_role(text: &str) -> Result<Role> {
    match text {
        "admin" => Ok(Role::Admin),
        "writer" => Ok(Role::Writer),
        "reader" => Ok(Role::Reader),
        other => Err(Error::Corrupt(format!("unknown role {other:?}"))),
    }
}

impl Store {
    /// Tenants and API tokens: administration needs the `admin` role.
    pub fn auth(&self) -> Auth<'_> {
        Auth::new(self)
    }

    /// A view bound to the tenant and role of the API token `secret`.
    ///
    /// # Errors
    /// `Unauthorized` for a malformed, unknown, revoked or expired token (nothing is said of
    /// which).
    pub fn authenticate(&self, secret: &str) -> Result<Store> {
        let token = authenticate(self, secret)?;
        let scope =
            Scope { tenant: Arc::from(token.tenant_id.as_str()), role: token.role, bound: true };
        Ok(self.with_scope(scope))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_secret_has_the_token_shape_and_its_checksum_holds() -> Result<()> {
        let mut bytes = [0_u8; 32];
        crate::ids::IdGen::new(None)?.fill(&mut bytes);
        let secret = secret_from(&bytes);
        let text = secret.expose();
        assert_eq!(text.len(), PREFIX.len() + BODY_CHARS + CHECKSUM_CHARS);
        assert!(checksum_holds(text));
        let mut tampered = text.to_owned();
        let last = tampered.pop().map_or('0', |c| if c == 'a' { 'b' } else { 'a' });
        tampered.push(last);
        assert!(!checksum_holds(&tampered));
        assert!(!checksum_holds("spn_short"));
        assert!(!format!("{secret:?}").contains(&text[4..]), "Debug redacts the secret");
        Ok(())
    }

    #[test]
    fn base62_is_big_endian_and_fixed_width() {
        assert_eq!(base62(&[0], 3), "000");
        assert_eq!(base62(&[61], 2), "0z");
        assert_eq!(base62(&[62], 2), "10");
        assert_eq!(base62(&[0xff; 32], BODY_CHARS).len(), BODY_CHARS);
    }
}
