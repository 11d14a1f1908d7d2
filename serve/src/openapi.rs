//! The OpenAPI 3.1 description of `foya serve` (`openapi.json` beside this file), served
//! at `GET /openapi.json`. A unit test keeps it true to the router's route table both
//! ways; the end-to-end test validates real response bodies against its schemas.

/// The document, as served.
pub(crate) const DOCUMENT: &str = include_str!("openapi.json");

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use std::collections::BTreeSet;

    #[test]
    fn the_document_lists_exactly_the_routes_of_the_router() {
        let doc: serde_json::Value = serde_json::from_str(super::DOCUMENT).unwrap();
        assert_eq!(doc["openapi"], "3.1.0");
        let mut documented = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for method in item.as_object().unwrap().keys() {
                if method != "parameters" {
                    documented.insert((method.to_uppercase(), path.clone()));
                }
            }
        }
        let routed: BTreeSet<(String, String)> = super::super::routes::route_table()
            .into_iter()
            .map(|(m, p, _)| (m.as_str().to_owned(), p.to_owned()))
            .collect();
        assert_eq!(documented, routed);
    }
}
