//! How this program reaches an API server (SPEC §2.6): `serve`, `check` and the benches
//! all build their client here, so a kubeconfig flag means the same to each of them.
//!
//! Precedence:
//! 1. a named kubeconfig file (`--kubeconfig`), with the context if one is given, else its
//!    current context;
//! 2. else, when a context is given (`check --context`), the default kubeconfig (`$KUBECONFIG`
//!    with its list of files merged, else `~/.kube/config`) with that context;
//! 3. else the pod's service account (in-cluster), then the default kubeconfig's current
//!    context.
//!
//! [`context_namespace`] reads the namespace of the selected context for `check`, which
//! names only what the user named: a kubeconfig flag or `$KUBECONFIG`, never
//! `~/.kube/config` alone.

use std::path::Path;

use kube::Client;
use kube::config::{InClusterError, KubeConfigOptions, Kubeconfig, KubeconfigError};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read kubeconfig {path}: {reason}")]
    Kubeconfig { path: String, reason: String },
    #[error("kubeconfig has no context {0:?}")]
    NoContext(String),
    #[error("cannot connect with the kubeconfig: {0}")]
    Connect(String),
    #[error("no in-cluster config and no usable kubeconfig: {0}")]
    NoConfig(String),
    #[error("cannot connect with the in-cluster service account: {0}")]
    InCluster(String),
}

/// A client for the API server chosen by the precedence of the module doc.
pub async fn connect(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<Client, ClientError> {
    let (config, in_cluster) = settings(kubeconfig, context, &Process).await?;
    Client::try_from(config).map_err(|e| {
        if in_cluster {
            ClientError::InCluster(e.to_string())
        } else {
            ClientError::Connect(e.to_string())
        }
    })
}

/// The settings [`connect`] would use, for a caller that adjusts them (timeouts,
/// impersonation) before building its client.
pub async fn config(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<kube::Config, ClientError> {
    Ok(settings(kubeconfig, context, &Process).await?.0)
}

/// `(context, namespace)` of the selected context when it names a namespace; `None` when no
/// kubeconfig was named (flag or `$KUBECONFIG`) or its context names none.
pub fn context_namespace(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<Option<(String, String)>, ClientError> {
    context_namespace_in(kubeconfig, context, &Process)
}

/// What the precedence reads besides a named file: the process's environment, or a test's.
trait Environment {
    /// `$KUBECONFIG` is set and not empty.
    fn kubeconfig_var(&self) -> bool;
    /// The default kubeconfig: `$KUBECONFIG`'s files merged, else `~/.kube/config`.
    fn default_kubeconfig(&self) -> Result<Kubeconfig, KubeconfigError>;
    fn in_cluster(&self) -> Result<kube::Config, InClusterError>;
}

struct Process;

impl Environment for Process {
    fn kubeconfig_var(&self) -> bool {
        std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty())
    }

    fn default_kubeconfig(&self) -> Result<Kubeconfig, KubeconfigError> {
        Kubeconfig::read()
    }

    fn in_cluster(&self) -> Result<kube::Config, InClusterError> {
        kube::Config::incluster()
    }
}

/// The kubeconfig the user named: the file, else `$KUBECONFIG`, else none.
fn named(path: Option<&Path>, env: &dyn Environment) -> Result<Option<Kubeconfig>, ClientError> {
    match path {
        Some(p) => Kubeconfig::read_from(p)
            .map(Some)
            .map_err(|e| ClientError::Kubeconfig {
                path: p.display().to_string(),
                reason: e.to_string(),
            }),
        None if env.kubeconfig_var() => {
            env.default_kubeconfig()
                .map(Some)
                .map_err(|e| ClientError::Kubeconfig {
                    path: "$KUBECONFIG".to_string(),
                    reason: e.to_string(),
                })
        }
        None => Ok(None),
    }
}

/// The settings and whether they are the in-cluster ones.
async fn settings(
    path: Option<&Path>,
    context: Option<&str>,
    env: &dyn Environment,
) -> Result<(kube::Config, bool), ClientError> {
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    let kc = if path.is_some() || context.is_some() {
        match named(path, env)? {
            Some(kc) => kc,
            None => env
                .default_kubeconfig()
                .map_err(|e| ClientError::Kubeconfig {
                    path: "~/.kube/config".to_string(),
                    reason: e.to_string(),
                })?,
        }
    } else {
        if let Ok(c) = env.in_cluster() {
            return Ok((c, true));
        }
        let kc = env
            .default_kubeconfig()
            .map_err(|e| ClientError::NoConfig(e.to_string()))?;
        return kube::Config::from_custom_kubeconfig(kc, &options)
            .await
            .map(|c| (c, false))
            .map_err(|e| ClientError::NoConfig(e.to_string()));
    };
    kube::Config::from_custom_kubeconfig(kc, &options)
        .await
        .map(|c| (c, false))
        .map_err(|e| ClientError::Connect(e.to_string()))
}

fn context_namespace_in(
    path: Option<&Path>,
    context: Option<&str>,
    env: &dyn Environment,
) -> Result<Option<(String, String)>, ClientError> {
    let Some(kc) = named(path, env)? else {
        return Ok(None);
    };
    let Some(name) = context
        .map(str::to_string)
        .or_else(|| kc.current_context.clone())
    else {
        return Ok(None);
    };
    let found = kc
        .contexts
        .iter()
        .find(|c| c.name == name)
        .ok_or_else(|| ClientError::NoContext(name.clone()))?;
    Ok(found
        .context
        .as_ref()
        .and_then(|c| c.namespace.clone())
        .filter(|n| !n.is_empty())
        .map(|n| (name, n)))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    /// A kubeconfig with one context per `(name, server, namespace)`, the first current.
    fn kubeconfig(contexts: &[(&str, &str, Option<&str>)]) -> String {
        let mut clusters = String::new();
        let mut named = String::new();
        for (name, server, ns) in contexts {
            clusters.push_str(&format!(
                "- name: {name}\n  cluster: {{server: \"{server}\"}}\n"
            ));
            let ns = ns.map(|n| format!(", namespace: {n}")).unwrap_or_default();
            named.push_str(&format!(
                "- name: {name}\n  context: {{cluster: {name}, user: u{ns}}}\n"
            ));
        }
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: {}\nclusters:\n{clusters}contexts:\n{named}users:\n- name: u\n  user: {{token: t}}\n",
            contexts[0].0
        )
    }

    /// An environment whose default kubeconfig is `default` (a file) or absent, with or
    /// without a service account.
    struct Fake {
        default: Option<PathBuf>,
        var: bool,
        in_cluster: bool,
    }

    impl Environment for Fake {
        fn kubeconfig_var(&self) -> bool {
            self.var
        }

        fn default_kubeconfig(&self) -> Result<Kubeconfig, KubeconfigError> {
            match &self.default {
                Some(p) => Kubeconfig::read_from(p),
                None => Err(KubeconfigError::FindPath),
            }
        }

        fn in_cluster(&self) -> Result<kube::Config, InClusterError> {
            if self.in_cluster {
                let mut c =
                    kube::Config::new("https://in-cluster.test:443".parse().expect("a uri"));
                c.default_namespace = "pod-ns".into();
                Ok(c)
            } else {
                Err(InClusterError::ReadEnvironmentVariable(
                    std::env::VarError::NotPresent,
                ))
            }
        }
    }

    /// The API server's host and whether the settings are the in-cluster ones, or the error.
    fn server(r: Result<(kube::Config, bool), ClientError>) -> Result<(String, bool), String> {
        r.map(|(c, in_cluster)| {
            (
                c.cluster_url.host().unwrap_or_default().to_string(),
                in_cluster,
            )
        })
        .map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn precedence_file_then_context_then_in_cluster() {
        let dir = tempfile::tempdir().expect("tempdir");
        let named = dir.path().join("named");
        let default = dir.path().join("default");
        std::fs::write(
            &named,
            kubeconfig(&[
                ("n-one", "https://named-one.test", None),
                ("n-two", "https://named-two.test", Some("team")),
            ]),
        )
        .expect("write");
        std::fs::write(
            &default,
            kubeconfig(&[
                ("d-one", "https://default-one.test", None),
                ("d-two", "https://default-two.test", None),
            ]),
        )
        .expect("write");
        let env = |in_cluster: bool| Fake {
            default: Some(default.clone()),
            var: false,
            in_cluster,
        };
        // (file, context, a service account present, expected host and in-cluster)
        type Case<'a> = (Option<&'a Path>, Option<&'a str>, bool, (&'a str, bool));
        let cases: [Case<'_>; 5] = [
            // A named file wins over everything, at its current context or the one given.
            (Some(&named), None, true, ("named-one.test", false)),
            (Some(&named), Some("n-two"), true, ("named-two.test", false)),
            // A context alone selects from the default kubeconfig, never in-cluster.
            (None, Some("d-two"), true, ("default-two.test", false)),
            // Nothing named: in-cluster first, then the default kubeconfig.
            (None, None, true, ("in-cluster.test", true)),
            (None, None, false, ("default-one.test", false)),
        ];
        for (i, (file, context, in_cluster, (host, want_in_cluster))) in
            cases.into_iter().enumerate()
        {
            let got = server(settings(file, context, &env(in_cluster)).await);
            assert_eq!(got, Ok((host.to_string(), want_in_cluster)), "case {i}");
        }
    }

    #[tokio::test]
    async fn failures_say_which_source_failed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let named = dir.path().join("named");
        std::fs::write(&named, kubeconfig(&[("one", "https://one.test", None)])).expect("write");
        let nothing = Fake {
            default: None,
            var: false,
            in_cluster: false,
        };
        let missing = dir.path().join("missing");
        let e = server(settings(Some(&missing), None, &nothing).await).expect_err("no file");
        assert!(
            e.starts_with(&format!("cannot read kubeconfig {}: ", missing.display())),
            "{e}"
        );
        let e = server(settings(Some(&named), Some("other"), &nothing).await)
            .expect_err("no such context");
        assert!(e.starts_with("cannot connect with the kubeconfig: "), "{e}");
        let e = server(settings(None, Some("one"), &nothing).await).expect_err("no default");
        assert!(
            e.starts_with("cannot read kubeconfig ~/.kube/config: "),
            "{e}"
        );
        let e = server(settings(None, None, &nothing).await).expect_err("nothing at all");
        assert!(
            e.starts_with("no in-cluster config and no usable kubeconfig: "),
            "{e}"
        );
        let var_broken = Fake {
            default: Some(missing.clone()),
            var: true,
            in_cluster: false,
        };
        let e =
            server(settings(None, Some("one"), &var_broken).await).expect_err("bad $KUBECONFIG");
        assert!(e.starts_with("cannot read kubeconfig $KUBECONFIG: "), "{e}");
    }

    #[test]
    fn context_namespace_reads_only_a_named_kubeconfig() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("config");
        std::fs::write(
            &file,
            kubeconfig(&[
                ("plain", "https://a.test", None),
                ("team", "https://b.test", Some("team-ns")),
                ("blank", "https://c.test", Some("")),
            ]),
        )
        .expect("write");
        let env = |var: bool| Fake {
            default: Some(file.clone()),
            var,
            in_cluster: false,
        };
        let pair = |c: &str, n: &str| Some((c.to_string(), n.to_string()));
        let ns = |path: Option<&Path>, context: Option<&str>, var: bool| {
            context_namespace_in(path, context, &env(var)).map_err(|e| e.to_string())
        };
        assert_eq!(
            ns(Some(&file), None, false),
            Ok(None),
            "current context has none"
        );
        assert_eq!(
            ns(Some(&file), Some("team"), false),
            Ok(pair("team", "team-ns"))
        );
        assert_eq!(
            ns(Some(&file), Some("blank"), false),
            Ok(None),
            "empty is none"
        );
        assert_eq!(
            ns(Some(&file), Some("gone"), false),
            Err("kubeconfig has no context \"gone\"".to_string())
        );
        // $KUBECONFIG counts as named; ~/.kube/config alone does not.
        assert_eq!(ns(None, Some("team"), true), Ok(pair("team", "team-ns")));
        assert_eq!(ns(None, Some("team"), false), Ok(None));
    }
}
