//! A TLS terminator on loopback in front of a plain TCP service (DynamoDB Local), with a
//! certificate authority and a certificate for 127.0.0.1 made at run time, so the
//! functions reach DynamoDB over HTTPS as on AWS. They trust its root only through the
//! runtime's test hook (`TEST_EXTRA_ROOT_CERT_FILE`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

pub struct TlsTerminator {
    /// `https://127.0.0.1:<port>`
    pub url: String,
    /// The PEM file of the root that signed the terminator's certificate.
    pub root_pem: PathBuf,
    server: tokio::task::JoinHandle<()>,
}

impl TlsTerminator {
    /// Listens on a free loopback port and forwards every connection's plain bytes to
    /// `upstream` (an `http://host:port` endpoint).
    pub async fn start(upstream: &str) -> Result<Self, String> {
        let upstream: SocketAddr = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .map_err(|e| format!("upstream {upstream}: {e}"))?;
        let (root_pem, acceptor) = certificates()?;
        let path = std::env::temp_dir().join(format!("career-tls-root-{}-{}.pem", std::process::id(), upstream.port()));
        std::fs::write(&path, root_pem).map_err(|e| format!("{}: {e}", path.display()))?;
        let listener = TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
        let url = format!("https://{}", listener.local_addr().map_err(|e| e.to_string())?);
        let server = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let _ = client.set_nodelay(true);
                    let Ok(mut tls) = acceptor.accept(client).await else { return };
                    let Ok(mut plain) = TcpStream::connect(upstream).await else { return };
                    let _ = plain.set_nodelay(true);
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                });
            }
        });
        Ok(TlsTerminator { url, root_pem: path, server })
    }
}

impl Drop for TlsTerminator {
    fn drop(&mut self) {
        self.server.abort();
        let _ = std::fs::remove_file(&self.root_pem);
    }
}

/// A fresh root and a certificate it signs for 127.0.0.1: the root's PEM and an acceptor
/// serving the certificate.
fn certificates() -> Result<(String, TlsAcceptor), String> {
    let error = |e: rcgen::Error| e.to_string();
    let mut root_params = CertificateParams::new(Vec::<String>::new()).map_err(error)?;
    root_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    root_params.distinguished_name.push(DnType::CommonName, "career bench root (made at run time)");
    let root_key = KeyPair::generate().map_err(error)?;
    let root = root_params.self_signed(&root_key).map_err(error)?;
    let leaf_params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).map_err(error)?;
    let leaf_key = KeyPair::generate().map_err(error)?;
    let leaf = leaf_params.signed_by(&leaf_key, &root, &root_key).map_err(error)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(leaf.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
        )
        .map_err(|e| e.to_string())?;
    Ok((root.pem(), TlsAcceptor::from(Arc::new(config))))
}
