"""Usage statistics of the node, its pods and containers: collected on demand (`collector`), shaped as kubelet's
Summary API and resource metrics (`summary`); /proc and disk-usage parsers in `procfs`."""
