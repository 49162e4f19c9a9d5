//! Each sink kind's own settings open a sink of that kind. The kind is matched once, in
//! [`open_one`], and each backend is handed its own settings: none of them can meet
//! another kind's settings at run time.

use std::sync::Arc;

use async_trait::async_trait;

use super::elasticsearch::settings::ElasticsearchSettings;
use super::http::settings::HttpSettings;
use super::http::{HttpSink, Wire};
use super::mysql::MysqlSink;
use super::mysql::settings::MysqlSettings;
use super::postgres::PostgresSink;
use super::postgres::settings::PostgresSettings;
use super::settings::{SinkBackend, SinkSettings};
use super::sqlite::SqliteSink;
use super::{Sink, SinkError, SinkOpening};

/// A kind's own keys of `[sink]`, which open a sink of that kind.
#[async_trait]
pub trait OpenSink {
    /// Opens the sink at `sink.url`; `sink` gives the keys every kind reads.
    async fn open(
        &self,
        sink: &SinkSettings,
        opening: &SinkOpening,
    ) -> Result<Arc<dyn Sink>, SinkError>;
}

#[async_trait]
impl OpenSink for HttpSettings {
    async fn open(&self, sink: &SinkSettings, o: &SinkOpening) -> Result<Arc<dyn Sink>, SinkError> {
        let wire = Wire::Http(self);
        Ok(Arc::new(
            HttpSink::open(&sink.url, wire, o.longest_wait).await?,
        ))
    }
}

#[async_trait]
impl OpenSink for ElasticsearchSettings {
    async fn open(&self, sink: &SinkSettings, o: &SinkOpening) -> Result<Arc<dyn Sink>, SinkError> {
        let wire = Wire::Elasticsearch(self);
        Ok(Arc::new(
            HttpSink::open(&sink.url, wire, o.longest_wait).await?,
        ))
    }
}

#[async_trait]
impl OpenSink for PostgresSettings {
    async fn open(&self, sink: &SinkSettings, o: &SinkOpening) -> Result<Arc<dyn Sink>, SinkError> {
        Ok(Arc::new(PostgresSink::open(sink, self, o).await?))
    }
}

#[async_trait]
impl OpenSink for MysqlSettings {
    async fn open(&self, sink: &SinkSettings, o: &SinkOpening) -> Result<Arc<dyn Sink>, SinkError> {
        Ok(Arc::new(MysqlSink::open(sink, self, o).await?))
    }
}

/// One sink at `settings.url`, of the kind its backend names (SQLite has no keys of its
/// own).
pub(super) async fn open_one(
    settings: &SinkSettings,
    opening: &SinkOpening,
) -> Result<Arc<dyn Sink>, SinkError> {
    match &settings.backend {
        SinkBackend::Sqlite => Ok(Arc::new(SqliteSink::open(settings).await?)),
        SinkBackend::Http(own) => own.open(settings, opening).await,
        SinkBackend::Elasticsearch(own) => own.open(settings, opening).await,
        SinkBackend::Postgres(own) => own.open(settings, opening).await,
        SinkBackend::Mysql(own) => own.open(settings, opening).await,
    }
}
