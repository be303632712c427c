//! Tenants and API tokens (DESIGN.md §5.6) through the public API: administration, suspended
//! tenants, tokens that open views bound to a tenant and a role, revocation, expiry, and
//! secrets that never show in `Debug`.
mod common;

use std::sync::Arc;

use serde_json::json;
use spindle::{
    Error, ManualClock, NewItem, Options, Page, Role, Store, Stream, TenantStatus, TenantUpdate,
    TxOutcome,
};

const T0: i64 = 1_700_000_000_000;

fn store_at(clock: &ManualClock) -> Store {
    let options = Options::default().clock(Arc::new(clock.clone()));
    common::new_store_with(options)
}

fn suspend(store: &Store, tenant: &str, status: TenantStatus) {
    let update = TenantUpdate::default().status(status);
    store.auth().update_tenant(tenant, update).expect("update tenant");
}

#[test]
fn tenants_are_created_read_listed_and_updated() {
    let store = common::new_store();
    let acme = store.auth().create_tenant("acme", "Acme Corp").expect("create");
    assert_eq!((acme.id.as_str(), acme.status), ("acme", TenantStatus::Active));
    let twice = store.auth().create_tenant("acme", "Again");
    assert!(matches!(twice, Err(Error::Conflict(_))), "{twice:?}");
    let bad = store.auth().create_tenant("", "Nameless");
    assert!(matches!(bad, Err(Error::InvalidInput(_))), "{bad:?}");
    let ids: Vec<String> =
        store.auth().tenants().expect("list").into_iter().map(|t| t.id).collect();
    assert_eq!(ids, ["acme", "default"], "nothing written by the refused calls");
    let update = TenantUpdate::default().name("Acme Inc");
    let renamed = store.auth().update_tenant("acme", update).expect("rename");
    assert_eq!(renamed.name, "Acme Inc");
    assert_eq!(store.auth().tenant("acme").expect("get"), renamed);
    assert!(matches!(store.auth().tenant("nope"), Err(Error::NotFound { .. })));
}

#[test]
fn a_suspended_tenant_reads_but_every_write_is_refused_until_it_is_active_again() {
    let store = common::new_store();
    store.auth().create_tenant("acme", "Acme").expect("create");
    let acme = store.tenant("acme").expect("view");
    let stream = Stream::custom("orders");
    acme.events().append(&stream, "placed", json!({ "n": 1 })).expect("append while active");
    suspend(&store, "acme", TenantStatus::Suspended);
    let append = acme.events().append(&stream, "placed", json!({ "n": 2 }));
    assert!(matches!(append, Err(Error::TenantSuspended(_))), "{append:?}");
    let enqueue = acme.queue().enqueue(NewItem::new("q", json!({})));
    assert!(matches!(enqueue, Err(Error::TenantSuspended(_))), "{enqueue:?}");
    let closure = acme.transaction(|_tx| Ok(TxOutcome::Commit(())));
    assert!(matches!(closure, Err(Error::TenantSuspended(_))), "{closure:?}");
    assert_eq!(acme.events().read(&stream, 0, 10).expect("reads still work").len(), 1);
    store.events().append(&stream, "placed", json!({})).expect("other tenants write");
    suspend(&store, "acme", TenantStatus::Archived);
    assert!(acme.graphs().create(json!({})).is_err(), "archived: reads only");
    suspend(&store, "acme", TenantStatus::Active);
    acme.events().append(&stream, "placed", json!({ "n": 3 })).expect("active again");
}

#[test]
fn a_token_opens_a_view_bound_to_its_tenant_and_role() {
    let store = common::new_store();
    store.auth().create_tenant("acme", "Acme").expect("create");
    let admin = store.tenant("acme").expect("acme admin view");
    let (reader_secret, reader) =
        admin.auth().create_token("ci", Role::Reader, None).expect("token");
    assert_eq!((reader.tenant_id.as_str(), reader.role), ("acme", Role::Reader));
    assert!(reader_secret.expose().starts_with("spn_"));
    assert!(!format!("{reader_secret:?}").contains(&reader_secret.expose()[4..]));
    let g = admin.graphs().create(json!({ "mine": true })).expect("acme graph");
    let theirs = store.graphs().create(json!({})).expect("default graph");

    let view = store.authenticate(reader_secret.expose()).expect("authenticate");
    assert_eq!((view.tenant_id(), view.role()), ("acme", Role::Reader));
    assert_eq!(view.graphs().get(&g).expect("read").metadata, json!({ "mine": true }));
    assert!(matches!(view.graphs().get(&theirs), Err(Error::NotFound { .. })), "isolated");
    let write = view.graphs().create(json!({}));
    assert!(matches!(write, Err(Error::Forbidden(_))), "{write:?}");

    let (writer_secret, _) = admin.auth().create_token("bot", Role::Writer, None).expect("token");
    let writer = store.authenticate(writer_secret.expose()).expect("authenticate");
    writer.graphs().create(json!({})).expect("a writer writes");
    let admin_op = writer.auth().create_token("escalate", Role::Admin, None);
    assert!(matches!(admin_op, Err(Error::Forbidden(_))), "{admin_op:?}");
    let listed: Vec<String> =
        admin.auth().tokens().expect("tokens").into_iter().map(|t| t.name).collect();
    assert_eq!(listed, ["ci", "bot"]);
    assert!(store.auth().tokens().expect("default's tokens").is_empty());
    assert_eq!(store.graphs().list(Page::first(10)).expect("list").len(), 1);
}

#[test]
fn revoked_expired_malformed_and_unknown_tokens_are_unauthorized() {
    let clock = ManualClock::new(T0);
    let store = store_at(&clock);
    let (secret, token) =
        store.auth().create_token("short", Role::Writer, Some(T0 + 60_000)).expect("token");
    store.authenticate(secret.expose()).expect("valid now");
    clock.advance_ms(60_000);
    assert!(matches!(store.authenticate(secret.expose()), Err(Error::Unauthorized)), "expired");

    let (secret, token_b) = store.auth().create_token("long", Role::Reader, None).expect("token");
    store.auth().revoke_token(&token_b.id).expect("revoke");
    store.auth().revoke_token(&token_b.id).expect("revoking twice does nothing");
    assert!(matches!(store.authenticate(secret.expose()), Err(Error::Unauthorized)), "revoked");

    let mut tampered = secret.expose().to_owned();
    let last = tampered.pop().map_or('0', |c| if c == 'a' { 'b' } else { 'a' });
    tampered.push(last);
    assert!(matches!(store.authenticate(&tampered), Err(Error::Unauthorized)));
    assert!(matches!(store.authenticate("spn_nope"), Err(Error::Unauthorized)));
    assert!(matches!(store.authenticate(""), Err(Error::Unauthorized)));
    let past = store.auth().create_token("past", Role::Reader, Some(T0));
    assert!(matches!(past, Err(Error::InvalidInput(_))), "{past:?}");
    assert!(matches!(store.auth().revoke_token("nope"), Err(Error::NotFound { .. })));
    let acme = store.tenant("acme").expect("view");
    let foreign = acme.auth().revoke_token(&token.id);
    assert!(matches!(foreign, Err(Error::NotFound { .. })), "another tenant's token: {foreign:?}");
}

#[test]
fn last_used_is_refreshed_at_most_once_a_minute() {
    let clock = ManualClock::new(T0);
    let store = store_at(&clock);
    let (secret, token) = store.auth().create_token("ci", Role::Reader, None).expect("token");
    let last_used = |store: &Store| {
        let tokens = store.auth().tokens().expect("tokens");
        tokens.into_iter().find(|t| t.id == token.id).and_then(|t| t.last_used_at_ms)
    };
    assert_eq!(last_used(&store), None);
    store.authenticate(secret.expose()).expect("use");
    assert_eq!(last_used(&store), Some(T0));
    clock.advance_ms(30_000);
    store.authenticate(secret.expose()).expect("use");
    assert_eq!(last_used(&store), Some(T0), "not again within the minute");
    clock.advance_ms(30_000);
    store.authenticate(secret.expose()).expect("use");
    assert_eq!(last_used(&store), Some(T0 + 60_000));
}

#[test]
fn a_token_view_stays_in_its_tenant_and_cannot_administer_tenants() {
    let store = common::new_store();
    store.auth().create_tenant("acme", "Acme").expect("create");
    store.auth().create_tenant("globex", "Globex").expect("create");
    let acme_root = store.tenant("acme").expect("view");
    let (secret, _) = acme_root.auth().create_token("ops", Role::Admin, None).expect("token");
    let acme = store.authenticate(secret.expose()).expect("authenticate");
    assert!(acme.tenant("acme").is_ok(), "its own tenant");
    assert!(matches!(acme.tenant("default"), Err(Error::Forbidden(_))));
    assert!(matches!(acme.tenant("globex"), Err(Error::Forbidden(_))));
    assert!(matches!(acme.auth().tenants(), Err(Error::Forbidden(_))));
    assert!(matches!(acme.auth().create_tenant("evil", "Evil"), Err(Error::Forbidden(_))));
    let update = TenantUpdate::default().status(TenantStatus::Suspended);
    assert!(matches!(acme.auth().update_tenant("default", update), Err(Error::Forbidden(_))));
    assert_eq!(acme.auth().tenant("acme").expect("own").id, "acme");
    assert!(matches!(acme.auth().tenant("globex"), Err(Error::NotFound { .. })));
    let ids: Vec<String> =
        store.auth().tenants().expect("list").into_iter().map(|t| t.id).collect();
    assert_eq!(ids, ["acme", "default", "globex"], "nothing written");
}

#[test]
fn a_suspended_tenants_token_cannot_administer_and_only_the_owner_reactivates() {
    let store = common::new_store();
    store.auth().create_tenant("acme", "Acme").expect("create");
    let (secret, _) = store
        .tenant("acme")
        .expect("view")
        .auth()
        .create_token("ops", Role::Admin, None)
        .expect("token");
    let acme = store.authenticate(secret.expose()).expect("authenticate");
    suspend(&store, "acme", TenantStatus::Suspended);
    let minted = acme.auth().create_token("more", Role::Admin, None);
    assert!(matches!(minted, Err(Error::TenantSuspended(_))), "{minted:?}");
    suspend(&store, "acme", TenantStatus::Active);
    acme.auth().create_token("more", Role::Writer, None).expect("active again");
}

#[test]
fn a_token_views_raw_sql_cannot_read_the_stores_tables() {
    if common::sqlite_only("raw SQL through Tx::sqlite") {
        return;
    }
    let store = common::new_store();
    store.auth().create_tenant("acme", "Acme").expect("create");
    store.graphs().create(json!({ "secret": "default's" })).expect("default graph");
    let (secret, _) = store
        .tenant("acme")
        .expect("view")
        .auth()
        .create_token("bot", Role::Writer, None)
        .expect("token");
    let acme = store.authenticate(secret.expose()).expect("authenticate");
    let peek = acme.transaction(|tx| {
        let count: i64 =
            tx.sqlite()?.query_row("SELECT count(*) FROM graphs", [], |row| row.get(0))?;
        Ok(TxOutcome::Commit(count))
    });
    assert!(peek.is_err(), "{peek:?}");
    let own = store.transaction(|tx| {
        let count: i64 =
            tx.sqlite()?.query_row("SELECT count(*) FROM graphs", [], |row| row.get(0))?;
        Ok(TxOutcome::Commit(count))
    });
    assert_eq!(own.expect("the owner reads"), 1);
    let ghost = store.tenant("ghost").expect("view").auth().create_token("t", Role::Reader, None);
    assert!(matches!(ghost, Err(Error::NotFound { .. })), "a token needs its tenant's row");
}

#[test]
fn a_read_only_store_lists_tenants_and_tokens_and_refuses_administration() {
    let shared = common::SharedStore::new();
    let store = shared.open();
    store.auth().create_tenant("acme", "Acme").expect("tenant");
    let acme = store.tenant("acme").expect("view");
    acme.auth().create_token("ci", Role::Writer, None).expect("token");
    store.close().expect("close");

    let options = Options::default().read_only(true);
    let store = shared.open_with(options);
    let tenants = store.auth().tenants().expect("listing tenants writes nothing");
    assert!(tenants.iter().any(|tenant| tenant.id == "acme"));
    assert_eq!(store.auth().tenant("acme").expect("one tenant").name, "Acme");
    let acme = store.tenant("acme").expect("view");
    let tokens = acme.auth().tokens().expect("listing tokens writes nothing");
    assert_eq!(tokens.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["ci"]);
    let refused = store.auth().create_tenant("other", "Other");
    assert!(matches!(refused, Err(Error::ReadOnly)), "{refused:?}");
    store.close().expect("close");
}
