//! The dashboard's pages, styles and scripts (`assets/`), embedded in the binary:
//! one HTML shell for every page (the script draws the page its path names) and the files under
//! `/assets/`. `dagre.min.js` is the graph layout library `@dagrejs/dagre` as npm ships it
//! (MIT, `dagre.LICENSE.txt`).
//!
//! For work on the pages, `SPINDLE_UI_ASSETS=<dir>` serves the files from that directory,
//! read at each request, so that an edit shows on reload without a rebuild.

use std::borrow::Cow;

use crate::ui::api::Reply;

/// An embedded file: its name under `/assets/`, its content type, its bytes.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

const INDEX: Asset = Asset {
    name: "index.html",
    content_type: "text/html; charset=utf-8",
    bytes: include_bytes!("assets/index.html"),
};

const ASSETS: [Asset; 4] = [
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("assets/app.js"),
    },
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        bytes: include_bytes!("assets/app.css"),
    },
    Asset {
        name: "dagre.min.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("assets/dagre.min.js"),
    },
    Asset {
        name: "favicon.svg",
        content_type: "image/svg+xml",
        bytes: include_bytes!("assets/favicon.svg"),
    },
];

/// The pages' paths, as patterns: `*` is one path segment.
const PAGES: [&str; 11] = [
    "/",
    "/runs",
    "/runs/*",
    "/queues",
    "/queues/*",
    "/schedules",
    "/processes",
    "/workflows",
    "/workflows/*",
    "/events",
    "/tenants",
];

/// The answer to a path outside `/api/`: an asset, or the page shell (404 for a path that is
/// no page: the shell then says so).
pub fn page_or_asset(method: &str, path: &str) -> Reply {
    if method != "GET" && method != "HEAD" {
        return Reply::error(405, format!("{method} is not allowed on pages"));
    }
    if let Some(name) = path.strip_prefix("/assets/") {
        return match ASSETS.iter().find(|asset| asset.name == name) {
            Some(asset) => file(200, asset),
            None => Reply::error(404, format!("no asset {name:?}")),
        };
    }
    let status = if PAGES.iter().any(|page| matches(page, path)) { 200 } else { 404 };
    file(status, &INDEX)
}

fn matches(pattern: &str, path: &str) -> bool {
    let path = if path.len() > 1 { path.trim_end_matches('/') } else { path };
    let (mut pattern, mut path) = (pattern.split('/'), path.split('/'));
    loop {
        match (pattern.next(), path.next()) {
            (None, None) => return true,
            (Some("*"), Some(part)) if !part.is_empty() => {}
            (Some(want), Some(part)) if want == part => {}
            _ => return false,
        }
    }
}

/// An asset's bytes, from `SPINDLE_UI_ASSETS` when set.
fn file(status: u16, asset: &Asset) -> Reply {
    let from_disk = std::env::var_os("SPINDLE_UI_ASSETS")
        .and_then(|dir| std::fs::read(std::path::Path::new(&dir).join(asset.name)).ok());
    let bytes = from_disk.map_or(Cow::Borrowed(asset.bytes), Cow::Owned);
    Reply::file(status, asset.content_type, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_paths_match_their_patterns_and_nothing_else() {
        assert!(matches("/", "/"));
        assert!(matches("/runs/*", "/runs/abc"));
        assert!(matches("/runs", "/runs/"));
        assert!(!matches("/runs/*", "/runs/"));
        assert!(!matches("/runs/*", "/runs/a/b"));
        assert!(!matches("/", "/nope"));
        assert_eq!(page_or_asset("GET", "/nope").status, 404);
        assert_eq!(page_or_asset("GET", "/queues/q1").status, 200);
        assert_eq!(page_or_asset("GET", "/assets/app.js").status, 200);
        assert_eq!(page_or_asset("GET", "/assets/../Cargo.toml").status, 404);
        assert_eq!(page_or_asset("POST", "/").status, 405);
    }
}
