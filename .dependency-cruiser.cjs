// The import rules `npm run lint` checks (dependency-cruiser): no cycles, and the layers point
// inward (docs/architecture.md): the store knows nothing of settings, the service nothing of its
// transports.
module.exports = {
  forbidden: [
    { name: 'no-cycles', severity: 'error', comment: 'An import cycle: one of these modules should not know the other.', from: {}, to: { circular: true } },
    { name: 'store-not-settings', severity: 'error', comment: 'store/ is handed plain options; settings are read at the edge (app.ts).', from: { path: '^src/store/' }, to: { path: '^src/settings' } },
    { name: 'service-not-server', severity: 'error', comment: 'service/ is protocol-free; transports (server/) call it, not the other way.', from: { path: '^src/service/' }, to: { path: '^src/server/' } },
    { name: 'algorithms-leaf', severity: 'error', comment: 'src/algorithms/ is a leaf: pure functions of numbers.', from: { path: '^src/algorithms/' }, to: { path: '^src/(?!algorithms/|model\.ts$)' } },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    includeOnly: '^src/',
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
  },
};
