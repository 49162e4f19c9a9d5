//! Schemas by id, fetched from the registry once and kept for the process's life (an id
//! never changes meaning); an id the registry does not have is asked again after a while.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::avro::AvroSchema;
use super::protobuf::ProtoSchema;
use super::registry::{RegisteredSchema, RegistryError, SchemaRegistry};

/// A schema ready to decode with.
#[derive(Debug)]
pub enum Schema {
    Avro(AvroSchema),
    Protobuf(ProtoSchema),
    /// JSON Schema: the body is the JSON as it is.
    Json,
}

impl Schema {
    pub fn kind(&self) -> &'static str {
        match self {
            Schema::Avro(_) => "AVRO",
            Schema::Protobuf(_) => "PROTOBUF",
            Schema::Json => "JSON",
        }
    }
}

/// How long a missing id is taken as missing before the registry is asked again.
const MISSING_FOR: Duration = Duration::from_secs(60);
/// References deeper than this are taken as a cycle.
const MAX_REFERENCE_DEPTH: usize = 32;

pub struct Schemas {
    registry: SchemaRegistry,
    found: HashMap<u32, Arc<Schema>>,
    /// Ids with no usable schema, with why and since when.
    unusable: HashMap<u32, (Instant, String)>,
}

impl Schemas {
    pub fn new(registry: SchemaRegistry) -> Self {
        Schemas {
            registry,
            found: HashMap::new(),
            unusable: HashMap::new(),
        }
    }

    pub fn registry(&self) -> &SchemaRegistry {
        &self.registry
    }

    /// The schema with this id: `Ok(Err(why))` when there is none to use (the records that
    /// carry the id are dead letters), `Err` on an outage or a refusal.
    pub async fn get(&mut self, id: u32) -> Result<Result<Arc<Schema>, String>, RegistryError> {
        if let Some(schema) = self.found.get(&id) {
            return Ok(Ok(schema.clone()));
        }
        if let Some((since, why)) = self.unusable.get(&id)
            && since.elapsed() < MISSING_FOR
        {
            return Ok(Err(why.clone()));
        }
        let built = match self.registry.schema(id).await {
            Ok(registered) => self.build(id, registered).await?,
            Err(RegistryError::Missing(why)) => Err(why),
            Err(e) => return Err(e),
        };
        match built {
            Ok(schema) => {
                let schema = Arc::new(schema);
                self.unusable.remove(&id);
                self.found.insert(id, schema.clone());
                tracing::info!(id, kind = schema.kind(), "schema fetched from the registry");
                Ok(Ok(schema))
            }
            Err(why) => {
                tracing::warn!(id, "no usable schema: {why}");
                self.unusable.insert(id, (Instant::now(), why.clone()));
                Ok(Err(why))
            }
        }
    }

    async fn build(
        &self,
        id: u32,
        registered: RegisteredSchema,
    ) -> Result<Result<Schema, String>, RegistryError> {
        let mut references = Vec::new();
        let mut seen = HashSet::new();
        if let Err(why) = self
            .references(&registered, 0, &mut seen, &mut references)
            .await?
        {
            return Ok(Err(format!("schema id {id}: {why}")));
        }
        let schema = match registered.kind() {
            "AVRO" => {
                let texts: Vec<String> = references.into_iter().map(|(_, text)| text).collect();
                AvroSchema::parse(&registered.schema, &texts).map(Schema::Avro)
            }
            "PROTOBUF" => {
                ProtoSchema::compile(&registered.schema, &references).map(Schema::Protobuf)
            }
            "JSON" => Ok(Schema::Json),
            other => Err(format!("schema type {other:?} is not one sluice reads")),
        };
        Ok(schema.map_err(|why| format!("schema id {id}: {why}")))
    }

    /// Every schema `schema` references, transitively, dependencies before dependants, as
    /// (the name it is referenced by, its text).
    fn references<'a>(
        &'a self,
        schema: &'a RegisteredSchema,
        depth: usize,
        seen: &'a mut HashSet<(String, i64)>,
        out: &'a mut Vec<(String, String)>,
    ) -> futures::future::BoxFuture<'a, Result<Result<(), String>, RegistryError>> {
        Box::pin(async move {
            if depth > MAX_REFERENCE_DEPTH {
                return Ok(Err("references nest deeper than 32 (a cycle?)".into()));
            }
            for reference in &schema.references {
                if !seen.insert((reference.subject.clone(), reference.version)) {
                    continue;
                }
                let target = match self
                    .registry
                    .version(&reference.subject, reference.version)
                    .await
                {
                    Ok(target) => target,
                    Err(RegistryError::Missing(why)) => return Ok(Err(why)),
                    Err(e) => return Err(e),
                };
                if let Err(why) = self.references(&target, depth + 1, seen, out).await? {
                    return Ok(Err(why));
                }
                out.push((reference.name.clone(), target.schema));
            }
            Ok(Ok(()))
        })
    }
}
