package ec2fake

import "strconv"

// describeAccountAttributes answers the account's attributes ("EC2 API Reference: DescribeAccountAttributes"):
// supported-platforms, default-vpc, max-instances, vpc-max-security-groups-per-interface, max-elastic-ips
// and vpc-max-elastic-ips, all or those AttributeName.N names.
func (s *Server) describeAccountAttributes(rg *region, f form) (any, *apiError) {
	defaultVPC := "none"
	if vpc := rg.defaultVPC(); vpc != nil {
		defaultVPC = vpc.ID
	}
	attrs := []struct {
		name   string
		values []string
	}{
		{"supported-platforms", []string{"VPC"}},
		{"vpc-max-security-groups-per-interface", []string{"5"}},
		{"max-elastic-ips", []string{strconv.Itoa(s.opts.MaxElasticIPs)}},
		{"max-instances", []string{strconv.Itoa(s.opts.MaxInstances)}},
		{"vpc-max-elastic-ips", []string{strconv.Itoa(s.opts.MaxElasticIPs)}},
		{"default-vpc", []string{defaultVPC}},
	}
	want := map[string]bool{}
	for _, n := range f.list("AttributeName") {
		known := false
		for _, a := range attrs {
			known = known || a.name == n
		}
		if !known {
			return nil, ec2Err("InvalidParameterValue", "Value (%s) for parameter attributeName is invalid. Unknown attribute.", n)
		}
		want[n] = true
	}
	out := &accountAttributesXML{}
	for _, a := range attrs {
		if len(want) > 0 && !want[a.name] {
			continue
		}
		x := accountAttributeXML{Name: a.name}
		for _, v := range a.values {
			x.Values.Items = append(x.Values.Items, attributeValueXML{v})
		}
		out.Attributes.Items = append(out.Attributes.Items, x)
	}
	return out, nil
}

type attributeValueXML struct {
	Value string `xml:"attributeValue"`
}

type accountAttributeXML struct {
	Name   string                 `xml:"attributeName"`
	Values set[attributeValueXML] `xml:"attributeValueSet"`
}

type accountAttributesXML struct {
	meta
	Attributes set[accountAttributeXML] `xml:"accountAttributeSet"`
}
