// Swagger UI's initializer, a file of its own: the page's Content-Security-Policy refuses
// inline script. Paths are relative to /docs, so a proxy's path prefix is kept.
"use strict";
window.ui = SwaggerUIBundle({
  url: "openapi.json",
  dom_id: "#swagger-ui",
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
  layout: "BaseLayout",
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  // no badge fetched from validator.swagger.io: nothing leaves this origin
  validatorUrl: null,
});
