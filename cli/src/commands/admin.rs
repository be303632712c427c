//! Tenant and token administration: `spindle tenants` and `spindle tokens`.

use serde_json::json;
use spindle::{Role, Store, TenantStatus, TenantUpdate};

use clap::Subcommand;

use crate::common::{CliError, Output, now_ms, parse_duration_ms};

#[derive(Subcommand)]
pub enum TenantCmd {
    /// Every tenant (the default).
    List,
    /// A new active tenant.
    Create {
        id: String,
        /// Its display name (the id when absent).
        #[arg(long)]
        name: Option<String>,
    },
    /// Refuse the tenant's writes (it can still read).
    Suspend { id: String },
    /// Let a suspended or archived tenant write again.
    Activate { id: String },
}

#[derive(Subcommand)]
pub enum TokenCmd {
    /// A new token; its secret is printed once.
    Create {
        name: String,
        /// `admin`, `writer` or `reader`.
        #[arg(long, default_value = "reader")]
        role: String,
        /// How long it works (`30d`, `12h`); forever when absent.
        #[arg(long)]
        expires_in: Option<String>,
    },
    /// The tenant's tokens (never their secrets).
    List,
    /// Stop a token from working.
    Revoke { id: String },
}

/// Lists tenants, or creates, suspends or activates one.
pub fn tenants(store: &Store, action: TenantCmd, out: &Output) -> Result<(), CliError> {
    let auth = store.auth();
    let status = |status| TenantUpdate::default().status(status);
    let changed = match action {
        TenantCmd::List => {
            let tenants = auth.tenants()?;
            if out.json {
                out.print_json(&serde_json::to_value(&tenants).map_err(spindle::Error::from)?);
                return Ok(());
            }
            println!("{:<32} {:<10} NAME", "ID", "STATUS");
            for tenant in &tenants {
                println!("{:<32} {:<10} {}", tenant.id, tenant.status.as_str(), tenant.name);
            }
            return Ok(());
        }
        TenantCmd::Create { id, name } => {
            auth.create_tenant(&id, name.as_deref().unwrap_or(&id))?
        }
        TenantCmd::Suspend { id } => auth.update_tenant(&id, status(TenantStatus::Suspended))?,
        TenantCmd::Activate { id } => auth.update_tenant(&id, status(TenantStatus::Active))?,
    };
    if out.json {
        out.print_json(&serde_json::to_value(&changed).map_err(spindle::Error::from)?);
    } else {
        println!("tenant {} {}", changed.id, changed.status.as_str());
    }
    Ok(())
}

/// Creates (printing the secret once), lists or revokes the tenant's tokens.
pub fn tokens(store: &Store, action: TokenCmd, out: &Output) -> Result<(), CliError> {
    match action {
        TokenCmd::Create { name, role, expires_in } => {
            let role = parse_role(&role)?;
            let expires_at_ms = match expires_in {
                Some(text) => Some(now_ms().saturating_add(parse_duration_ms(&text)?)),
                None => None,
            };
            let (secret, info) = store.auth().create_token(&name, role, expires_at_ms)?;
            if out.json {
                out.print_json(&json!({ "secret": secret.expose(), "token": info }));
            } else {
                println!("{}", secret.expose());
                out.note(&format!(
                    "token {} ({}); the secret is not shown again",
                    info.id, info.name
                ));
            }
        }
        TokenCmd::List => {
            let tokens = store.auth().tokens()?;
            if out.json {
                out.print_json(&serde_json::to_value(&tokens).map_err(spindle::Error::from)?);
                return Ok(());
            }
            println!("{:<36} {:<20} {:<7} STATE", "ID", "NAME", "ROLE");
            for token in &tokens {
                let state = if token.revoked_at_ms.is_some() { "revoked" } else { "active" };
                println!("{:<36} {:<20} {:<7} {state}", token.id, token.name, token.role.as_str());
            }
        }
        TokenCmd::Revoke { id } => {
            store.auth().revoke_token(&id)?;
            out.note(&format!("token {id} revoked"));
        }
    }
    Ok(())
}

fn parse_role(text: &str) -> Result<Role, CliError> {
    match text {
        "admin" => Ok(Role::Admin),
        "writer" => Ok(Role::Writer),
        "reader" => Ok(Role::Reader),
        other => Err(CliError::Bad(format!("a role is admin, writer or reader, not {other:?}"))),
    }
}
